"""torch's "guard ... is dropped with caching_precompile=True" warnings, for names a loading process imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.processes import child_env

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

_PROGRAM = """
import sys
import torch
import precompile



class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.l(x))  # guards on the global `torch` and `torch.relu`


precompile.install(sys.argv[1], save_on_exit=False)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
torch.compile(model)(torch.randn(2, 8))
torch.compile(Net())(torch.randn(2, 8))
"""


def _dropped_lines(tmp_path: Path, extra: dict[str, str]) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", _PROGRAM, str(tmp_path / "store")],
        env=child_env({"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), **extra}),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [line for line in proc.stderr.splitlines() if "dropped with caching_precompile" in line]


def test_dropped_guards_on_imported_names_are_not_warned_about(tmp_path: Path) -> None:
    assert _dropped_lines(tmp_path / "a", {}) == []
    # torch's own behaviour, with the patch turned off: one warning per guard.
    unpatched = _dropped_lines(tmp_path / "b", {"PRECOMPILE_PATCHES_OFF": "dropped_guard_notes"})
    assert any("MODULE_MATCH guard on G['__import_" in line for line in unpatched), unpatched
    assert any("guard on G['torch']" in line for line in unpatched), unpatched
