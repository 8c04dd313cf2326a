"""The README's first command: `python -m precompile demo`, on a temporary store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def test_demo_compiles_then_loads_with_empty_caches(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"), "PYTHONWARNINGS": "default"}
    env.pop("PRECOMPILE_STORE", None)
    proc = subprocess.run(
        [sys.executable, "-m", "precompile", "demo"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
    )
    text = " ".join(proc.stdout.split())  # the console wraps long lines
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # It says what each process did, as it goes: the first compiled and
    # saved, the second loaded and compiled nothing.
    assert "process 1, empty caches: compiling" in text
    assert "process 1: compiled " in text and "saved 1 entry" in text
    assert "process 2: loaded 1 entry from the store in " in text
    assert "compiled" not in text.split("process 2: ")[-1]
    assert "outputs identical: True" in text and "store hits in process 2: 1" in text
    # The user's default store is left alone, and torch's own warnings are not shown.
    assert not (home / ".cache" / "precompile").exists()
    assert "temporary" in text
    assert "NumPy" not in proc.stdout + proc.stderr and "Warning" not in proc.stderr, proc.stderr
