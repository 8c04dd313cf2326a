"""Child processes the tests start: `python -m precompile` and fresh Python interpreters.

A fresh interpreter is the only way to see what another host sees: nothing
compiled, imported or memoised in this process leaks into it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import precompile

TESTS = Path(__file__).resolve().parents[1]
PROGRAMS = TESTS / "programs"
STORE_WORKER = TESTS / "store_worker.py"
SERVING_WORKER = TESTS / "serving_worker.py"

# Child processes import the same precompile as this one (the installed
# package, or a source tree with its extension built).
PACKAGE_ROOT = str(Path(precompile.__file__).resolve().parents[1])


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment with `extra` on top, and the tested precompile first on PYTHONPATH."""
    env = {**os.environ, **(extra or {})}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    return env


def run_precompile(
    *args: object, env: Mapping[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`python -m precompile ARGS...` in a child process; its exit status is the caller's to check."""
    return subprocess.run(
        [sys.executable, "-m", "precompile", *map(str, args)],
        capture_output=True,
        text=True,
        env=child_env(env),
        timeout=timeout,
    )


def run_python(
    *args: object, env: Mapping[str, str] | None = None, timeout: float | None = 600, tail: int = 4000
) -> subprocess.CompletedProcess[str]:
    """`python ARGS...` in a fresh interpreter (`env`, else this process's environment).

    A child that fails fails the test, with the last `tail` characters of its
    stderr as the message.
    """
    proc = subprocess.run(
        [sys.executable, *map(str, args)],
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-tail:]
    return proc


def last_line(text: str) -> str:
    """The last line a child printed: where the programs put their result, after any noise."""
    return text.strip().splitlines()[-1]
