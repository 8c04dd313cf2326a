"""The README's first command: `python -m precompile demo` on a default store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def test_demo_compiles_then_loads_with_empty_caches(tmp_path: Path) -> None:
    env = {**os.environ, "PRECOMPILE_STORE": str(tmp_path / "store")}
    proc = subprocess.run(
        [sys.executable, "-m", "precompile", "demo"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "outputs identical: True" in proc.stdout
    assert "store hits in process 2: 1" in proc.stdout
    refs = subprocess.run(
        [sys.executable, "-m", "precompile", "--store", str(tmp_path / "store"), "ls", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refs.returncode == 0 and "dynamo/" in refs.stdout
