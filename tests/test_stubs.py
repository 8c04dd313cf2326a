"""The shipped type stubs match the compiled module."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_core_stubs_match_the_extension() -> None:
    pytest.importorskip("mypy")
    proc = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "precompile._core"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
