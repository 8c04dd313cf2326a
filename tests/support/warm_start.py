"""Helpers for two-process warm-start tests: the scenario program run with fresh caches, and a compiler spy."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from support.counters import counter

SCENARIO = Path(__file__).resolve().parents[1] / "programs" / "scenario.py"
_COMPILERS = ("g++", "gcc", "c++", "cc", "clang", "clang++")


def compiler_spy(bin_dir: Path, log: Path, env: dict[str, str] | None = None) -> None:
    """Put wrappers for the C/C++ compilers in `bin_dir` that log each call.

    A compiler named by `CC` in `env` (Triton builds its stubs with it) is
    wrapped too, and `env["CC"]` pointed at the wrapper.
    """
    bin_dir.mkdir(parents=True, exist_ok=True)
    wanted = {name: shutil.which(name) for name in _COMPILERS}
    if env is not None and env.get("CC"):
        wanted["cc-from-env"] = shutil.which(env["CC"]) or env["CC"]
    for name, real in wanted.items():
        if real is None:
            continue
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\nexec "{real}" "$@"\n')
        script.chmod(0o755)
    if env is not None and env.get("CC"):
        env["CC"] = str(bin_dir / "cc-from-env")


_VERSION_QUERIES = ("--version", "-v")


def compiler_runs(log: Path) -> list[str]:
    """Logged compiler calls, other than version queries.

    torch asks the compiler for its version (`g++ -v`, `g++ --version`) to
    fingerprint cache keys; those compile nothing.
    """
    if not log.exists():
        return []
    runs = []
    for line in log.read_text().splitlines():
        args = line.split()[1:]
        if len(args) == 1 and args[0] in _VERSION_QUERIES:
            continue
        runs.append(line)
    return runs


@contextlib.contextmanager
def _other_sides_hidden(work: Path, side: Path) -> Iterator[None]:
    """The other sides' Inductor and Triton dirs moved away while `side` runs.

    A stored object may name a path in the host that saved it (a kernel's
    source file, where its autotuning result sits beside it). On one machine
    that path would still be there, which a fresh host never has.
    """
    moved = []
    try:
        for other in work.iterdir():
            if other == side or not other.is_dir():
                continue
            for name in ("inductor", "triton"):
                path = other / name
                if path.is_dir():
                    path.rename(other / f"{name}.hidden")
                    moved.append(path)
        yield
    finally:
        for path in moved:
            (path.parent / f"{path.name}.hidden").rename(path)


def run_scenario(
    name: str,
    mode: str,
    store: Path,
    work: Path,
    extra_env: dict[str, str] | None = None,
    program: Path = SCENARIO,
    timeout: float = 900,
) -> dict[str, Any]:
    """Run one side in a fresh process with its own Inductor and Triton caches."""
    side = work / mode
    side.mkdir(parents=True, exist_ok=True)
    log = side / "compiler.log"
    env = dict(os.environ)
    compiler_spy(side / "bin", log, env)
    env.update(
        TORCHINDUCTOR_CACHE_DIR=str(side / "inductor"),
        TRITON_CACHE_DIR=str(side / "triton"),
        PATH=f"{side / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        PYTHONWARNINGS="default",
    )
    env.pop("CXX", None)
    env.update(extra_env or {})
    out = side / "result.json"
    with _other_sides_hidden(work, side):
        proc = subprocess.run(
            [sys.executable, str(program), name, mode, str(store), str(out)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    if proc.returncode != 0:
        raise AssertionError(f"{mode} side of {name} failed:\n{proc.stderr[-6000:]}")
    result = json.loads(out.read_text())
    result["outputs"] = torch.load(str(out) + ".pt")
    result["compiler_runs"] = compiler_runs(log)
    result["stderr"] = proc.stderr
    return result


def assert_same_outputs(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    """The two sides computed the same outputs, bit for bit."""
    assert len(a) == len(b)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def assert_compiled_nothing(b: dict[str, Any]) -> None:
    """The loading side served from the store: a hit, no cache error, no graph
    compiled and no compiler run."""
    assert counter(b, "dynamo_cache", "dynamo_cache_hit") >= 1, b["counters"]
    assert counter(b, "dynamo_cache", "dynamo_cache_error") == 0, b["stderr"][-3000:]
    assert counter(b, "inductor", "fxgraph_cache_miss") == 0, b["counters"]
    assert counter(b, "aot_autograd", "autograd_cache_miss") == 0, b["counters"]
    assert b["compiler_runs"] == [], b["compiler_runs"]


def load_scenario(module_name: str) -> ModuleType:
    """The scenario program imported in this process as `module_name` (its
    models and scenarios, without running it)."""
    spec = importlib.util.spec_from_file_location(module_name, SCENARIO)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
