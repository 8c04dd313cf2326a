"""Parametrized modules (weight_norm, spectral_norm, `register_parametrization`) in a guard state.

`torch.nn.utils.parametrize.register_parametrization` swaps a module's class
for one it creates on the spot, `Parametrized<Cls>`: a subclass of the
module's class with one property per parametrized tensor, and a
`__getstate__` that raises so the module can only be saved through its
`state_dict()`. A guard state pickles the frame's modules, so every frame
that reads such a module (wav2vec2's and HuBERT's positional convolution,
every convolution of a weight-normed vocoder) was bypassed, and a fresh
host compiled it again.

Such a module is saved as its original class (by name, as any module
class), the names of its parametrized tensors and its attributes, pruned
as torch prunes any module's (`_parametrized_module`). The loading process
rebuilds it the way `register_parametrization` built it, through torch's
own `_inject_new_class` and `_inject_property` (`stored.
_rebuild_parametrized_module`), so its class has the properties, with the
same code, that the compile read.

Each parametrized module has a class of its own, made at run time: no two
processes, and no two instances, share one, so the type guard on it
(`___check_type_id`, an identity check) could never pass in another
process. On a class the store rebuilt, that guard is built as the check
that a live class is the same class in every way but identity
(`_ParametrizedTypeGuards`): made by the same torch code from the same
original class, with the same attributes and the same parametrized tensor
names, on a module whose parametrizations have the same types in the same
order. A module without parametrizations, with another original class, or
with another parametrization fails it: a miss, and the frame compiles.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import torch

from .patch import _Patch

__all__ = ["parametrized_module_rule", "parametrized_type_guards", "parametrizes_here", "remember_rebuilt", "signature"]


@functools.cache
def _torch_codes() -> tuple[Any, Any] | None:
    """The code of the `__getstate__` and of the property getter torch's
    parametrize puts on a class it makes, or None on a torch that makes no
    such class (then nothing here applies)."""
    try:
        from torch.nn.utils import parametrize

        module = torch.nn.Module()
        parametrize._inject_new_class(module)
        parametrize._inject_property(module, "probe")
        cls = type(module)
        getstate = vars(cls)["__getstate__"]
        getter = vars(cls)["probe"].fget
        return getstate.__code__, getter.__code__
    except Exception:
        return None


def parametrizes_here() -> bool:
    """Whether this torch's parametrize makes the classes this module recognises."""
    return _torch_codes() is not None


def _tensor_name(getter: Any) -> Any:
    """The tensor name a property getter made by `_inject_property` closes over."""
    try:
        cell = getter.__closure__[getter.__code__.co_freevars.index("tensor_name")]
        return cell.cell_contents
    except (AttributeError, ValueError, IndexError, TypeError):
        return None


# Attributes a class gains from use, not from how it was made: copyreg caches
# `__slotnames__` on a class the first time one of its instances is copied.
_CACHES = frozenset({"__slotnames__"})


def signature(cls: type) -> tuple[Any, ...] | None:
    """What makes a `Parametrized<Cls>` class what it is, identity aside:
    its original class, its name, its own attribute names and its
    parametrized tensor names; None for any class parametrize did not make."""
    codes = _torch_codes()
    if codes is None or not isinstance(cls, type) or len(cls.__bases__) != 1:
        return None
    own = vars(cls)
    getstate = own.get("__getstate__")
    if getattr(getstate, "__code__", None) is not codes[0]:
        return None
    names = []
    for name, value in own.items():
        if isinstance(value, property):
            if getattr(value.fget, "__code__", None) is not codes[1] or _tensor_name(value.fget) != name:
                return None
            names.append(name)
    attributes = tuple(sorted(set(own) - _CACHES))
    return (cls.__bases__[0], cls.__name__, attributes, tuple(sorted(names)))


def _parametrization_types(module: Any, names: tuple[str, ...]) -> tuple[tuple[type, ...], ...] | None:
    """The types of each named tensor's parametrizations, in order; None where
    the module holds none under a name."""
    holder = vars(module).get("_modules", {}).get("parametrizations")
    if not isinstance(holder, torch.nn.ModuleDict):
        return None
    found = []
    for name in names:
        chain = holder._modules.get(name)
        if not isinstance(chain, torch.nn.ModuleList):
            return None
        found.append(tuple(type(p) for p in chain))
    return tuple(found)


# The classes the store rebuilt while unpickling guard states, with their
# signatures: only a type guard on one of these is built structurally.
_rebuilt: weakref.WeakKeyDictionary[type, tuple[Any, ...]] = weakref.WeakKeyDictionary()


def remember_rebuilt(cls: type) -> None:
    """Mark `cls`, rebuilt from a guard state, for `_ParametrizedTypeGuards`."""
    sig = signature(cls)
    if sig is None:
        raise TypeError(f"{cls.__qualname__} is not a class torch's parametrize makes")
    _rebuilt[cls] = sig


def parametrized_module_rule(pickler: Any, obj: Any) -> Any:
    """The reduction of a parametrized module a guard reads (see the module docstring);
    None for anything else."""
    if not isinstance(obj, torch.nn.Module):
        return None
    read = getattr(pickler, "guard_tree_values", None)
    if read is None or id(obj) not in read:
        return None  # torch leaves an unread module out
    if id(obj) in getattr(pickler, "missing_values", {}) or id(obj) in getattr(pickler, "empty_values", {}):
        return None  # torch's placeholders
    sig = signature(type(obj))
    if sig is None:
        return None
    _prune_like_torch(pickler, obj)
    from .stored import _rebuild_parametrized_module, _set_module_state

    original, name, _, tensor_names = sig
    return _rebuild_parametrized_module, (original, name, tensor_names), dict(vars(obj)), None, None, _set_module_state


def _prune_like_torch(pickler: Any, obj: Any) -> None:
    """Leave out the module attributes no guard reads, as torch does for any module."""
    prune = getattr(pickler, "_prune_unguarded_attributes", None)
    if callable(prune):
        prune(obj)
        return
    # torch 2.11 prunes inline in its reducer: callables, tensors and modules stay.
    missing = getattr(pickler, "missing_values", None)
    if missing is None:
        return
    for attr in vars(obj).values():
        if isinstance(attr, (torch.Tensor, torch.nn.Module)) or id(attr) in pickler.guard_tree_values:
            continue
        if callable(attr):
            continue
        missing[id(attr)] = attr


def _matches(saved: tuple[Any, ...], saved_types: tuple[tuple[type, ...], ...] | None, value: Any) -> bool:
    """Whether live `value`'s class has signature `saved` and its
    parametrizations the types `saved_types`."""
    if signature(type(value)) != saved:
        return False
    return saved_types is None or _parametrization_types(value, saved[3]) == saved_types


class _ParametrizedTypeGuards(_Patch):
    """A type guard on a rebuilt `Parametrized<Cls>` class checks the class's makeup, not its identity.

    A class `register_parametrization` makes exists in one process only;
    the class the loading process rebuilds for the stored module
    (`stored._rebuild_parametrized_module`) is never the live module's, so
    torch's identity check on it would refuse every call. While installed,
    TYPE_MATCH on a value whose class the store rebuilt is built as a check
    that the live class has the same signature (`signature`) and the live
    module's parametrizations the same types. Every other TYPE_MATCH is
    torch's.

    Torch versions: 2.11 and newer: every release guards the identity of a
    module's class.
    Steps aside: `_apply` replaces nothing where torch's parametrize makes no
    class this module recognises, or `GuardBuilder.TYPE_MATCH` is missing.
    """

    def _apply(self) -> None:
        from torch._dynamo.guards import GuardBuilder, get_verbose_code_parts

        original = vars(GuardBuilder).get("TYPE_MATCH")
        if not callable(original) or _torch_codes() is None:
            return

        @functools.wraps(original)
        def TYPE_MATCH(builder: Any, guard: Any) -> None:
            if not _rebuilt:
                # Nothing rebuilt in this process: torch's own, without
                # evaluating the guard's source a second time.
                original(builder, guard)
                return
            value = builder.get(guard)
            saved = _rebuilt.get(type(value))
            if saved is None:
                original(builder, guard)
                return
            saved_types = _parametrization_types(value, saved[3])
            code = (
                f"precompile_parametrized_class({builder.arg_ref(guard)}), "
                f"class={saved[1]} of {saved[0].__module__}.{saved[0].__qualname__}, tensors={list(saved[3])}"
            )
            builder._set_guard_export_info(guard, [code])
            builder.get_guard_manager(guard).add_lambda_guard(
                functools.partial(_matches, saved, saved_types),
                get_verbose_code_parts(code, guard),
                guard.user_stack,
            )

        self._replace(GuardBuilder, "TYPE_MATCH", TYPE_MATCH)


parametrized_type_guards = _ParametrizedTypeGuards()
