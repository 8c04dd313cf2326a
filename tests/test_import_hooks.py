"""Hooks run once a module is imported, and patches that wait for a module
(Triton's runtime on a CPU-only start), on real modules written to disk."""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from precompile._torch.import_hooks import when_imported
from precompile._torch.patch import _Patch


@pytest.fixture
def module_dir(tmp_path: Path) -> Iterator[Path]:
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in [n for n in sys.modules if n.startswith("precompile_hooked_")]:
        del sys.modules[name]


def _write(directory: Path, name: str, body: str = "VALUE = 1\n") -> str:
    (directory / f"{name}.py").write_text(body)
    importlib.invalidate_caches()
    return name


def test_a_hook_runs_after_the_module_code(module_dir: Path) -> None:
    name = _write(module_dir, "precompile_hooked_a", "VALUE = 41\nVALUE += 1\n")
    seen: list[tuple[types.ModuleType, int]] = []
    assert when_imported(name, lambda m: seen.append((m, m.VALUE))) is not None
    assert seen == []
    module = importlib.import_module(name)
    assert seen == [(module, 42)]
    # The import resolved as without the hook: the file's own loader, source and all.
    assert module.__spec__ is not None and module.__spec__.origin == str(module_dir / f"{name}.py")
    assert module.__loader__.get_source(name) == "VALUE = 41\nVALUE += 1\n"  # type: ignore[union-attr]
    assert "exec_module" not in vars(module.__loader__)
    importlib.reload(module)
    assert len(seen) == 1  # once


def test_a_hook_on_an_imported_module_runs_now(module_dir: Path) -> None:
    module = importlib.import_module(_write(module_dir, "precompile_hooked_b"))
    seen: list[types.ModuleType] = []
    assert when_imported(module.__name__, seen.append) is None
    assert seen == [module]


def test_a_cancelled_hook_never_runs(module_dir: Path) -> None:
    name = _write(module_dir, "precompile_hooked_c")
    seen: list[types.ModuleType] = []
    cancel = when_imported(name, seen.append)
    assert cancel is not None
    cancel()
    importlib.import_module(name)
    assert seen == []


def test_a_failed_import_runs_no_hook_and_keeps_it(module_dir: Path) -> None:
    name = _write(module_dir, "precompile_hooked_d", "raise RuntimeError('broken')\n")
    seen: list[types.ModuleType] = []
    when_imported(name, seen.append)
    with pytest.raises(RuntimeError, match="broken"):
        importlib.import_module(name)
    assert seen == []
    _write(module_dir, name, "VALUE = 2\n")
    assert importlib.import_module(name).VALUE == 2
    assert [m.VALUE for m in seen] == [2]


class _Holder:
    value = "torch's"


class _WaitingPatch(_Patch):
    """Replaces `_Holder.value` once the watched module is imported."""

    def __init__(self, module: str) -> None:
        super().__init__()
        self.module = module

    def _apply(self) -> None:
        self._after_import(self.module, lambda m: self._replace(_Holder, "value", f"ours, after {m.__name__}"))


def test_a_waiting_patch_applies_at_import_and_stops_clean(module_dir: Path) -> None:
    name = _write(module_dir, "precompile_hooked_e")
    patch = _WaitingPatch(name)
    patch.start()
    assert patch.active and _Holder.value == "torch's"
    importlib.import_module(name)
    assert _Holder.value == f"ours, after {name}"
    patch.stop()
    assert not patch.active and _Holder.value == "torch's"


def test_a_patch_stopped_before_the_import_changes_nothing(module_dir: Path) -> None:
    name = _write(module_dir, "precompile_hooked_f")
    patch = _WaitingPatch(name)
    patch.start()
    patch.stop()
    assert not patch.active
    importlib.import_module(name)
    assert _Holder.value == "torch's"
    patch.start()  # imported by now: applies at once
    assert _Holder.value == f"ours, after {name}"
    patch.stop()
    assert _Holder.value == "torch's"
