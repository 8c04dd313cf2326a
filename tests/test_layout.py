"""The torch-free parts of the package stay torch-free.

The command line, the remote and the storage layers serve hosts that never
compile; importing them must not cost (or require) a torch import.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

TORCH_FREE = ["precompile", "precompile.remote", "precompile.cli", "precompile.warning", "precompile.layers"]


@pytest.mark.parametrize("module", TORCH_FREE)
def test_importing_leaves_torch_out(module: str) -> None:
    code = f"import sys, {module}; print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False", f"importing {module} imported torch"


def test_importing_all_of_them_leaves_torch_out() -> None:
    code = f"import sys, {', '.join(TORCH_FREE)}; print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
