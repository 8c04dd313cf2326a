"""The functions stored guard states name by module path: keep them here, under these names.

A guard state the store writes pickles these by reference, as
`precompile._torch.stored.<name>` (docs/FORMAT.md, the entry's `dynamo`
pickle), so a rename or a move here breaks every stored entry; entries
written before the adapter was a package name them
`precompile._torch_compat.<name>`, which resolves to the same functions.
"""

from __future__ import annotations

import importlib
import threading
import types
from typing import Any

import torch

from .. import object_paths


def _same(saved: Any, live: Any) -> bool:
    """Whether `live` is data equal to `saved`, type, order and all."""
    if saved is live:
        return True
    if type(saved) is not type(live):
        return False
    if isinstance(saved, (tuple, list)):
        return len(saved) == len(live) and all(_same(a, b) for a, b in zip(saved, live))
    if isinstance(saved, dict):
        return list(saved) == list(live) and all(_same(v, live[k]) for k, v in saved.items())
    try:
        return bool(saved == live)
    except Exception:
        return False


# What `_import_checked` found changed, per thread, while a guard state
# unpickles (`unpickle_guards_state`); None outside one.
_changed_reads = threading.local()


def _import_checked(module_name: str, qualname: str, saved: dict[str, Any]) -> Any:
    """The module (`qualname` empty) or class `_named_reads` saved, by name, its
    guarded data compared with what it holds here."""
    owner: object = importlib.import_module(module_name)
    if qualname:
        owner = object_paths.walk(owner, qualname)
    found = getattr(_changed_reads, "found", None)
    if found is not None:
        for name, value in saved.items():
            live = object_paths.lookup(owner, name)
            # One it lacks here is left to the guard build (Dynamo sets some
            # of its own marks on classes as it compiles).
            if live is not object_paths.NOTHING and not _same(value, live):
                found.append(
                    f"{qualname or module_name}.{name} is {repr(live)[:80]}, the compile saw {repr(value)[:80]}"
                )
    return owner


def _rebuild_dict_subclass(cls: type, items: list[tuple[Any, Any]], attributes: dict[str, Any] | None) -> Any:
    """A dict subclass `_dict_subclass_items` saved, its items as they were."""
    rebuilt: dict[Any, Any] = dict.__new__(cls)
    dict.update(rebuilt, items)
    if attributes:
        vars(rebuilt).update(attributes)
    return rebuilt


def _rebuild_dim_marked(rebuild: Any, args: tuple[Any, ...], markings: dict[str, Any]) -> Any:
    """A tensor `_tensor_dim_markings` saved: torch's rebuild, then its markings."""
    tensor = rebuild(*args)
    for name, value in markings.items():
        setattr(tensor, name, value)
    return tensor


def _rebuild_optimizer(cls: type, attributes: dict[str, Any]) -> Any:
    """An optimizer `_optimizer_as_saved` saved: its attributes as they were."""
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
        raise TypeError(f"{cls!r} is not an optimizer class")
    optimizer = cls.__new__(cls)
    vars(optimizer).update(attributes)
    return optimizer


def _new_generator(device: str) -> torch.Generator:
    """A generator `_generator_by_device` saved: a new one on its device."""
    if not isinstance(device, str):
        raise TypeError(f"a generator's device is a string, not {type(device).__name__}")
    return torch.Generator(device=device)


def _rebuild_guarded_function(
    code: types.CodeType,
    scope: str,
    name: str,
    qualname: str,
    module: Any,
    defaults: tuple[Any, ...] | None,
    kwdefaults: dict[str, Any] | None,
    closure: tuple[types.CellType, ...] | None,
) -> types.FunctionType:
    """A function `_function_by_value` saved, with the names it had.

    torch's `_unpickle_nested_function` passes the qualified name where
    `FunctionType` takes `__name__`, so a guard on `fn.__name__` (torch 2.13
    guards `func.__name__` in transformers' `deprecate_kwarg` wrapper) fails
    every call. `__module__` is the wrapped function's (functools.wraps
    copied it), `scope` the module whose globals the code runs in.
    """
    fn = types.FunctionType(code, importlib.import_module(scope).__dict__, name, defaults, closure)
    fn.__qualname__ = qualname
    fn.__module__ = module
    fn.__kwdefaults__ = kwdefaults
    return fn


def _import_script_function(module_name: str, qualname: str) -> Any:
    """The script function `_script_function_by_name` saved, from its module."""

    fn = object_paths.walk(importlib.import_module(module_name), qualname)
    if not isinstance(fn, torch.jit.ScriptFunction):
        raise TypeError(f"{module_name}.{qualname} is a {type(fn).__name__} now, not the saved TorchScript function")
    return fn


def _import_custom_op(qualname: str) -> Any:
    """The custom op `_custom_op_by_name` saved: the one registered under its
    qualified name in this process."""
    from .custom_ops import registered_op

    op = registered_op(qualname)
    if op is None:
        raise LookupError(f"no custom op {qualname} is registered in this process")
    return op


def _rebuild_parametrized_module(original: type, name: str, tensor_names: tuple[str, ...]) -> Any:
    """A module `parametrized_module_rule` saved, its class made again as
    `register_parametrization` made it: a subclass of `original` named `name`
    with a property for each of `tensor_names` (its attributes follow, from
    `_set_module_state`)."""
    from torch.nn.utils import parametrize

    from .parametrized import remember_rebuilt

    if not (isinstance(original, type) and issubclass(original, torch.nn.Module)):
        raise TypeError(f"a parametrized module's class must derive from torch.nn.Module, not {original!r}")
    module = original.__new__(original)
    parametrize._inject_new_class(module)
    for tensor_name in tensor_names:
        parametrize._inject_property(module, tensor_name)
    if type(module).__name__ != name:
        raise TypeError(f"torch names a parametrized {original.__qualname__} {type(module).__name__}, not {name}")
    remember_rebuilt(type(module))
    return module


def _resolve_local_class(module_name: str, name: str, qualname: str, digest: str) -> type:
    """The class `local_classes.reference` saved: the one module-level `name`
    holds (or holds an instance of) here, refused unless it has the saved
    module, qualified name and code digest."""
    from .local_classes import class_digest

    value = getattr(importlib.import_module(module_name), name)
    cls = value if isinstance(value, type) else type(value)
    if cls.__module__ != module_name or cls.__qualname__ != qualname:
        raise TypeError(
            f"{module_name}.{name} reaches {cls.__module__}.{cls.__qualname__} now, not the saved {qualname}"
        )
    if class_digest(cls) != digest:
        raise TypeError(f"{module_name}.{name} reaches a {qualname} made by other code than the saved one")
    return cls


def _new_instance(cls: type) -> Any:
    """An instance of `cls` made without its `__init__`; its attributes follow
    (`_set_module_state` for a module)."""
    if not isinstance(cls, type):
        raise TypeError(f"{cls!r} is not a class")
    new: Any = cls.__new__
    return new(cls)


def _set_module_state(module: Any, state: dict[str, Any]) -> None:
    """Set a rebuilt module's attributes as `nn.Module.__setstate__` does."""
    torch.nn.Module.__setstate__(module, state)  # type: ignore[no-untyped-call]
