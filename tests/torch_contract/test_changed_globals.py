"""Module globals, class attributes and registries changed since the save.

torch alone rebuilds such guards on the loading process's values; the
stored variant compares them with what the compile saw and refuses the call
(a miss that computes the new value), serving again once the value is back.
"""

from __future__ import annotations

import collections
import contextlib
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from support.torch_contract import reset
from torch._dynamo.precompile_context import PrecompileContext
from torch._dynamo.utils import counters

import precompile
from precompile.miss_log import read_records

pytestmark = pytest.mark.torch


class _A:
    pass


class _B:
    pass


class _C:
    pass


class _D:
    pass


class _Registry(dict):
    """transformers' `_CanRecordRegistry`: keyed by the name of the owner's
    class, and with its own `get`, so Dynamo guards the order of its keys."""

    def __setitem__(self, owner: object, value: dict) -> None:
        super().__setitem__(type(owner).__name__, value)

    def get(self, owner: object) -> dict:  # type: ignore[override]
        return super().get(type(owner).__name__) or {}


_C_MODEL = _C()


# Reached through a module, as transformers' registry is. torch saves the
# module by name, so its guards would be rebuilt on whatever the loading
# process's module holds when `torch.compile` installs the entry.
_registry_module = types.ModuleType("precompile_contract_registry")
_registry_module.REG = _Registry()  # type: ignore[attr-defined]
_registry_module.FACTOR = 2  # type: ignore[attr-defined]
_registry_module.FAST = True  # type: ignore[attr-defined]
_registry_module.ORDERED = None  # type: ignore[attr-defined]  # set below, once its class exists
sys.modules[_registry_module.__name__] = _registry_module


class _Holder:
    """The same registry and factor reached through a class, which is saved by name."""

    REG = _Registry()
    FACTOR = 2
    PROBE = 2


def _class_probe(x: torch.Tensor) -> torch.Tensor:
    return x * _Holder.PROBE


def _guards_class_attributes() -> bool:
    """Whether this torch's own guards, in one process, catch a class
    attribute changed since the compile (2.11's do not)."""
    x = torch.ones(1)
    compiled = torch.compile(_class_probe)
    compiled(x)
    _Holder.PROBE = 3
    try:
        return bool(compiled(x).item() == 3)
    finally:
        _Holder.PROBE = 2
        torch._dynamo.reset()


def _registry_scaled(x: torch.Tensor, deep: bool) -> torch.Tensor:
    if deep:
        for factor in _registry_module.REG.get(_C_MODEL).values():
            x = x * factor
        return x
    return x + 1


def _held_scaled(x: torch.Tensor, deep: bool) -> torch.Tensor:
    if deep:
        for factor in _Holder.REG.get(_C_MODEL).values():
            x = x * factor
        return x
    return x + 1


def _module_scaled(x: torch.Tensor) -> torch.Tensor:
    return x * _registry_module.FACTOR


def _class_scaled(x: torch.Tensor) -> torch.Tensor:
    return x * _Holder.FACTOR


def _flagged(x: torch.Tensor) -> torch.Tensor:
    return x + 1 if _registry_module.FAST else x - 1


class _OrderedRegistry(collections.OrderedDict):
    """An OrderedDict subclass with its own `__setitem__` (as transformers'
    `ModelOutput`): pickle must rebuild it, order and all."""

    def __setitem__(self, key: str, value: int) -> None:
        super().__setitem__(key, value)


_registry_module.ORDERED = _OrderedRegistry(u=3, w=4)  # type: ignore[attr-defined]


def _ordered_scaled(x: torch.Tensor) -> torch.Tensor:
    for factor in _registry_module.ORDERED.values():
        x = x * factor
    return x


@contextlib.contextmanager
def _saved_then_forgotten(fn: Callable[..., torch.Tensor], *calls: tuple) -> Iterator[None]:
    """Compile `fn` on each of `calls`, save, and forget what was compiled
    and loaded, as a fresh process would start; undone on the way out."""
    from torch._C._dynamo.eval_frame import _reset_precompile_entries

    compiled = torch.compile(fn)
    for args in calls:
        compiled(*args)
    PrecompileContext.save_to_dynamo_cache()
    reset()
    _reset_precompile_entries(fn.__code__)
    counters.clear()
    try:
        yield
    finally:
        _reset_precompile_entries(fn.__code__)


class _Recorder:
    """An object in the registry, as transformers' `OutputRecorder`s are."""


def _fill(registry: _Registry) -> None:
    registry.clear()
    registry[_A()] = {"p": 1}
    # Holding objects, the class's registry is not data the store compares
    # (`_named_reads`).
    registry[_B()] = {"q": _Recorder()} if registry is _Holder.REG else {"q": 2}
    registry[_C()] = {"u": 3, "w": 4}


@pytest.mark.parametrize("through", ["module", "class"])
def test_a_guard_through_a_module_or_class_expects_what_the_compile_saw(store: Path, through: str) -> None:
    """A module global or class attribute changed since the save: torch alone
    rebuilds the guard to expect the new value and runs the code traced with
    the old one. The stored variant refuses the call instead (a miss that
    computes the new value), and serves again once the value is back."""
    from torch._C._dynamo.eval_frame import _reset_precompile_entries

    owner, fn, name = {
        "module": (_registry_module, _module_scaled, "precompile_contract_registry"),
        "class": (_Holder, _class_scaled, "_Holder"),
    }[through]
    if through == "class" and not _guards_class_attributes():
        pytest.skip("this torch's guards miss a changed class attribute in one process too")
    PrecompileContext.clear()
    counters.clear()
    x = torch.ones(3)
    try:
        with _saved_then_forgotten(fn, (x,)):
            owner.FACTOR = 5
            with pytest.warns(precompile.PrecompileWarning, match="guard_failed"):
                torch.testing.assert_close(torch.compile(fn)(x), x * 5)
            assert counters["precompile"]["variants_unbuildable"] == 1
            assert counters["precompile"]["frames_recompiled"] == 1
        [miss] = [r for r in read_records(str(store)) if r.get("event") == "miss" and r["reason"] != "not_stored"]
        assert f"{name}.FACTOR is 5, the compile saw 2" in " ".join(miss["guards"]), miss
        owner.FACTOR = 2
        reset()
        _reset_precompile_entries(fn.__code__)
        with torch.compiler.set_stance("fail_on_recompile"):
            torch.testing.assert_close(torch.compile(fn)(x), x * 2)
    finally:
        owner.FACTOR = 2
        _reset_precompile_entries(fn.__code__)


def test_a_module_flag_changed_since_the_save_refuses_the_variant(store: Path) -> None:
    """A boolean, the commonest module-level switch: the attribute is the one
    the guard's source names, so its saved value is compared too."""
    from torch._C._dynamo.eval_frame import _reset_precompile_entries

    x = torch.ones(3)
    try:
        with _saved_then_forgotten(_flagged, (x,)):
            _registry_module.FAST = False
            with pytest.warns(precompile.PrecompileWarning, match="guard_failed"):
                torch.testing.assert_close(torch.compile(_flagged)(x), x - 1)
            assert counters["precompile"]["variants_unbuildable"] == 1
        [miss] = [r for r in read_records(str(store)) if r.get("event") == "miss" and r["reason"] != "not_stored"]
        assert "precompile_contract_registry.FAST is False, the compile saw True" in " ".join(miss["guards"]), miss
        _registry_module.FAST = True
        reset()
        _reset_precompile_entries(_flagged.__code__)
        with torch.compiler.set_stance("fail_on_recompile"):
            torch.testing.assert_close(torch.compile(_flagged)(x), x + 1)
    finally:
        _registry_module.FAST = True
        _reset_precompile_entries(_flagged.__code__)


def test_an_ordered_dict_subclass_a_guard_reads_comes_back_whole(store: Path) -> None:
    """Saved with the values its guards read, an OrderedDict subclass with
    its own `__setitem__` comes back with its keys in order: compared with
    the live one, the same, so the stored variant serves."""
    x = torch.ones(3)
    with _saved_then_forgotten(_ordered_scaled, (x,)):
        with torch.compiler.set_stance("fail_on_recompile"):
            torch.testing.assert_close(torch.compile(_ordered_scaled)(x), x * 12)
        assert counters["precompile"]["variants_unbuildable"] == 0


def test_a_registry_changed_since_the_save_refuses_only_the_variant_that_reads_it(store: Path) -> None:
    """A module-level registry without the key the compile looked up when
    `torch.compile` installs the entry: torch alone fails the whole install
    (IndexError on the key's position). The variant that reads the registry
    refuses every call, even once the key is back (its guards would be
    rebuilt on the registry as it is then); the other variant serves. With
    the registry as it was saved, both serve: it comes back with its keys
    (a dict subclass that rewrites keys on `__setitem__`)."""
    from torch._C._dynamo.eval_frame import _reset_precompile_entries

    x = torch.ones(3)
    registry = _registry_module.REG
    _fill(registry)
    try:
        with _saved_then_forgotten(_registry_scaled, (x, False), (x, True)):
            del registry["_C"]
            compiled = torch.compile(_registry_scaled)  # installs the stored entry
            assert counters["precompile"]["variants_unbuildable"] == 1
            assert counters["precompile"]["install_failed"] == 0
            with torch.compiler.set_stance("fail_on_recompile"):
                torch.testing.assert_close(compiled(x, False), x + 1)
            registry[_C()] = {"u": 5, "w": 6}
            with pytest.warns(precompile.PrecompileWarning, match="guard_failed"):
                torch.testing.assert_close(compiled(x, True), x * 30)
        [miss] = [r for r in read_records(str(store)) if r.get("event") == "miss" and r["reason"] != "not_stored"]
        assert "precompile_contract_registry.REG is {'_A': " in " ".join(miss["guards"]), miss
        _fill(registry)
        reset()
        _reset_precompile_entries(_registry_scaled.__code__)
        counters.clear()
        compiled = torch.compile(_registry_scaled)
        with torch.compiler.set_stance("fail_on_recompile"):
            torch.testing.assert_close(compiled(x, False), x + 1)
            torch.testing.assert_close(compiled(x, True), x * 12)
        assert counters["precompile"]["variants_unbuildable"] == 0
    finally:
        _reset_precompile_entries(_registry_scaled.__code__)
        _fill(registry)


def test_a_variant_whose_guards_cannot_be_built_refuses_and_the_rest_install(store: Path) -> None:
    """Reached through a class (saved by name), the registry lacks the third
    key when the entry installs: building that variant's guards raises
    IndexError, and torch alone drops the whole entry. That variant refuses
    every call; the other one serves."""
    x = torch.ones(3)
    _fill(_Holder.REG)
    with _saved_then_forgotten(_held_scaled, (x, False), (x, True)):
        del _Holder.REG["_C"]
        compiled = torch.compile(_held_scaled)
        assert counters["precompile"]["variants_unbuildable"] == 1
        assert counters["precompile"]["install_failed"] == 0
        with torch.compiler.set_stance("fail_on_recompile"):
            torch.testing.assert_close(compiled(x, False), x + 1)
        _Holder.REG[_C()] = {"u": 3, "w": 4}
        with pytest.warns(precompile.PrecompileWarning, match="guard_failed"):
            torch.testing.assert_close(compiled(x, True), x * 12)
        assert counters["precompile"]["frames_recompiled"] == 1
    _fill(_Holder.REG)
    [miss] = [r for r in read_records(str(store)) if r.get("event") == "miss" and r["reason"] != "not_stored"]
    assert "variant 1: precompile: these stored guards could not be built at install (IndexError" in " ".join(
        miss["guards"]
    ), miss
