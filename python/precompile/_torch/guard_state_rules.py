"""The rules that pickle values a guard state holds: by value, by name, or left out when no guard reads them."""

from __future__ import annotations

import contextvars
import inspect
import sys
import threading
from collections.abc import Callable
from typing import Any

import torch

from .. import object_paths
from .custom_ops import is_registered_op
from .local_classes import local_instance_rule
from .named_guards import _script_function_name
from .parametrized import parametrized_module_rule, parametrizes_here
from .stored import (
    _import_checked,
    _import_custom_op,
    _import_script_function,
    _new_generator,
    _rebuild_dict_subclass,
    _rebuild_dim_marked,
    _rebuild_guarded_function,
    _rebuild_optimizer,
)

# The attribute names each object's guards read, by the object's id, while
# `serialize_guards` saves a guard state on this thread.
_attributes_read = threading.local()


_Rule = Callable[[Any, Any], Any]


def _read_by_guards(pickler: Any) -> Any:
    """The ids of the values some guard of this state reads (torch's record)."""
    return getattr(pickler, "guard_tree_values", None)


def _function_by_value() -> _Rule | None:
    """A function a guard walks through is saved by value.

    A function whose module and qualified name do not import back to it
    (every `functools.wraps` wrapper copies the wrapped function's names) is
    saved as torch's `_Missing` placeholder. Where a guard's source walks
    through such a function (transformers' stacked decorators: `L['func']
    .__closure__[0].cell_contents.__closure__[3].cell_contents == False`),
    rebuilding that guard on load raises on the placeholder, the install fails
    and the frame compiles: Mistral, Gemma 2 and Phi-3 on torch 2.11. Newer
    torch rebuilds such a function from its code (`_reduce_function_by_value`);
    on a torch without that, a function some guard reaches is saved as torch
    saves a nested function (code, names, defaults, closure, with the globals
    of the module that defined it) and rebuilt as it was
    (`_rebuild_guarded_function`); a function no guard reaches stays a
    placeholder.
    """
    from torch._dynamo.guards import GuardsStatePickler

    if hasattr(GuardsStatePickler, "_reduce_function_by_value"):
        return None  # torch rebuilds them itself

    def rule(pickler: Any, obj: Any) -> Any:
        read = _read_by_guards(pickler)
        if not inspect.isfunction(obj) or read is None or id(obj) not in read:
            return None
        if "<locals>" in obj.__qualname__ or object_paths.resolves_by_name(obj):
            return None
        module_name = obj.__globals__.get("__name__")
        module = sys.modules.get(module_name) if isinstance(module_name, str) else None
        if module is None or vars(module) is not obj.__globals__:
            return None
        return _rebuild_guarded_function, (
            obj.__code__,
            module_name,
            obj.__name__,
            obj.__qualname__,
            obj.__module__,
            obj.__defaults__,
            obj.__kwdefaults__,
            obj.__closure__,
        )

    return rule


def _script_function_by_name() -> _Rule | None:
    """A module-level TorchScript function is saved by its module and name.

    Neither torch's pickler nor pickle can save a `torch.jit.script`
    function; a module-level one is its module's attribute under its Python
    function's qualified name, so the loading process gets the same object
    back (`_import_script_function`, which refuses anything but a script
    function there). See `_ScriptFunctionTypeGuards` for its type guard.
    """
    script_function = getattr(torch.jit, "ScriptFunction", None)
    if not isinstance(script_function, type):
        return None

    def rule(pickler: Any, obj: Any) -> Any:
        if isinstance(obj, script_function):
            name = _script_function_name(obj)
            if name is not None:
                return _import_script_function, name
        return None

    return rule


def _custom_op_by_name() -> _Rule | None:
    """A custom op (`torch.library.custom_op`) is saved by its qualified name.

    Dynamo guards the type of a global holding one it calls, and its pickle
    reaches the op's `Library`, which no pickler can save: torch bypassed
    every frame calling a custom op through its Python object. An op is one
    object per qualified name in a process (torch's own registry), so the
    loading process gets back the op it registered under that name
    (`_import_custom_op`, which refuses the state where none is).
    """

    def rule(pickler: Any, obj: Any) -> Any:
        return (_import_custom_op, (obj._qualname,)) if is_registered_op(obj) else None

    return rule


def _unguarded_bystander() -> _Rule | None:
    """A context variable or lock no guard reads is left out of a guard state.

    transformers' `capture_outputs` keeps its collector in a module-level
    object that wraps a `ContextVar`; the frames that set it guard the
    object's type and the keys of its `__dict__`, so its guard state carries
    the object, and pickling that reaches the `ContextVar`. Neither a context
    variable, its token or context, nor a thread lock can be pickled, so torch
    bypassed every such frame on every version (on 2.11, any later variant of
    transformers' shared `wrapper`). A value no guard reads is never looked at
    when the guards are rebuilt: it is saved as torch's own `_Missing`
    placeholder, as torch saves unguarded streams and weak references. One
    that a guard does read is left to torch (a bypass).
    """
    import _thread

    from torch._dynamo import guards

    placeholder = getattr(guards, "_Missing", None)
    if placeholder is None:
        return None
    kinds = (contextvars.ContextVar, contextvars.Token, contextvars.Context, _thread.LockType, _thread.RLock)

    def rule(pickler: Any, obj: Any) -> Any:
        read = _read_by_guards(pickler)
        if isinstance(obj, kinds) and read is not None and id(obj) not in read:
            return placeholder, (f"unguarded {type(obj).__name__}",)
        return None

    return rule


def _dict_subclass_items() -> _Rule | None:
    """A dict subclass that rewrites keys in `__setitem__` keeps its keys.

    Pickle rebuilds a dict subclass by setting each item through the class's
    `__setitem__`: transformers' `_CanRecordRegistry` turns every key into
    `str(key.__class__)`, so its saved keys all came back as `"<class 'str'>"`
    and every guard on them failed. Such a dict is saved as its class, its
    items and its attributes, and rebuilt with `dict.update`
    (`_rebuild_dict_subclass`). A subclass of another C mapping
    (`OrderedDict`, transformers' `ModelOutput`) is left to pickle.
    """

    def rule(pickler: Any, obj: Any) -> Any:
        kind = type(obj)
        if kind is dict or not isinstance(obj, dict) or kind.__setitem__ is dict.__setitem__:
            return None
        # Only where dict is the one C base: a C mapping such as OrderedDict
        # keeps its own order that `dict.update` would bypass.
        if any(not base.__flags__ & object_paths.HEAP_TYPE for base in kind.__mro__ if base not in (dict, object)):
            return None
        if not object_paths.resolves_by_name(kind):
            return None
        return _rebuild_dict_subclass, (kind, list(dict.items(obj)), getattr(obj, "__dict__", None) or None)

    return rule


def _named_reads() -> _Rule | None:
    """A module or class a guard walks into carries the data its guards read.

    torch saves a Python module or a class by name, so each guard through
    one (`G['config'].FLAG == 2`, `G['Config'].FLAG == 2`) would take its
    expected value from whatever the loading process holds when the entry is
    installed, not from what the compile saw: with `FLAG = 5` at install,
    the stored code, traced with 2, ran (torch's own store does the same).
    Such a module or class is saved by name together with the values of the
    data attributes (numbers, strings, `None`, and containers of data) the
    guards' sources take of it (`_attributes_of`). The loading process
    compares them with what the name imports there (`_import_checked`); a
    guard state whose module or class holds another value is not built
    (`_UnbuildableGuards`): that variant refuses every call, and a call only
    it would have served compiles. Functions, classes and other objects are
    not compared, and an attribute the loading process lacks is left to the
    guard build. A custom op held there is compared too, by identity (it is
    saved by name, `_custom_op_by_name`): the frame's code calls the operator
    of the op it traced.
    """

    def rule(pickler: Any, obj: Any) -> Any:
        names = (getattr(_attributes_read, "current", None) or {}).get(id(obj))
        if not names:
            return None
        if inspect.ismodule(obj):
            module_name, qualname = obj.__name__, ""
        elif isinstance(obj, type) and object_paths.resolves_by_name(obj):
            module_name, qualname = obj.__module__, obj.__qualname__
        else:
            return None
        kept = {}
        for name in sorted(names):
            value = object_paths.lookup(obj, name)
            if value is not object_paths.NOTHING and (_plain(value) or is_registered_op(value)):
                kept[name] = value
        if not kept:
            return None
        return _import_checked, (module_name, qualname, kept)

    return rule


def _parametrized_modules() -> _Rule | None:
    """A parametrized module (weight_norm, spectral_norm, any
    `register_parametrization`) is saved as its original class, its
    parametrized tensor names and its attributes: its own class raises when
    pickled. See `precompile._torch.parametrized`."""
    return parametrized_module_rule if parametrizes_here() else None


def _is_dim_marking(name: str) -> bool:
    return name.startswith("_dynamo_") or name == "_has_dynamo_dim_marking"


def _tensor_dim_markings() -> _Rule | None:
    """A guarded tensor keeps the dimension markings the compile saw.

    `torch._dynamo.mark_dynamic` (and `mark_static`, `mark_unbacked`,
    `maybe_mark_dynamic`) set Python attributes on the tensor
    (`_dynamo_dynamic_indices`, `_has_dynamo_dim_marking`, ...), and the
    tensor's guard checks a call's markings against the ones the compile saw.
    torch's pickler saves a tensor as its metadata only, so the loading
    process rebuilt that guard as "no marking at compile time" and refused
    every marked call: each `mark_dynamic` caller recompiled. A tensor a
    guard reads is saved as torch saves it, plus those attributes, and gets
    them back before the guards are built (`_rebuild_dim_marked`); the guard
    is then the one the compile built.
    """
    from torch._dynamo.guards import GuardsStatePickler

    # Taken before `_GuardStateReducers` replaces it: torch's own reduction.
    torch_reduce = vars(GuardsStatePickler).get("reducer_override")
    if torch_reduce is None:
        return None

    def rule(pickler: Any, obj: Any) -> Any:
        if not isinstance(obj, torch.Tensor) or obj.device.type == "meta":
            return None
        read = _read_by_guards(pickler)
        if read is None or id(obj) not in read:
            return None
        markings = {k: v for k, v in getattr(obj, "__dict__", {}).items() if _is_dim_marking(k)}
        if not markings:
            return None
        reduced = torch_reduce(pickler, obj)
        if not isinstance(reduced, tuple) or len(reduced) != 2 or not callable(reduced[0]):
            return None
        return _rebuild_dim_marked, (reduced[0], reduced[1], markings)

    return rule


def _optimizer_as_saved() -> _Rule | None:
    """A guarded optimizer comes back as saved, without its class's `__setstate__`.

    A compiled training step that calls `opt.step()` guards the optimizer's
    param groups, so its guard state carries the optimizer; the tensors no
    guard reads in its `state` (Adam's `step` counts) are saved as torch's
    `_Missing` placeholder. Pickle rebuilds the optimizer through
    `__setstate__`, and Adam's converts each `step` with `float()`, which
    raises on the placeholder: the guard state never unpickled and every
    compiled training step with Adam or AdamW recompiled. An optimizer a
    guard reads is saved as its class and its attribute dict, and rebuilt
    without `__setstate__` (`_rebuild_optimizer`): the attributes are the ones
    the compile saw, already in the form `__setstate__` would make them.
    """
    optimizer = getattr(torch.optim, "Optimizer", None)
    if not isinstance(optimizer, type):
        return None

    def rule(pickler: Any, obj: Any) -> Any:
        if not isinstance(obj, optimizer):
            return None
        read = _read_by_guards(pickler)
        if read is None or id(obj) not in read or not object_paths.resolves_by_name(type(obj)):
            return None
        return _rebuild_optimizer, (type(obj), dict(vars(obj)))

    return rule


def _generator_by_device() -> _Rule | None:
    """A `torch.Generator` is saved as its device alone.

    A frame taking a generator (`torch.randn(..., generator=g)`) guards its
    type, so its guard state carries it; torch pickles a generator with its
    state tensor, which the guard-state pickler saves as a fake tensor, and
    `Generator.__setstate__` raises on that at load (torch alone: a
    SystemError out of the call in every other process). No guard reads a
    generator's state or seed: the loading process gets a new generator on
    the same device (`_new_generator`), enough to rebuild guards on its type.
    """

    def rule(pickler: Any, obj: Any) -> Any:
        return (_new_generator, (str(obj.device),)) if type(obj) is torch.Generator else None

    return rule


def _local_classes() -> _Rule | None:
    """A class torch cannot name that a module-level name reaches, and the
    instances of such a class, are saved by that name. See
    `precompile._torch.local_classes`."""
    return local_instance_rule


_REDUCER_RULES: tuple[Callable[[], _Rule | None], ...] = (
    _parametrized_modules,
    _tensor_dim_markings,
    _optimizer_as_saved,
    _function_by_value,
    _script_function_by_name,
    _custom_op_by_name,
    _generator_by_device,
    _unguarded_bystander,
    _dict_subclass_items,
    _named_reads,
    _local_classes,
)


_PLAIN = (bool, int, float, complex, str, bytes, type(None))


def _plain(value: Any, depth: int = 0) -> bool:
    """Data whose equality says the guards built on it expect the same."""
    if isinstance(value, _PLAIN):
        return True
    if depth > 4:
        return False
    if isinstance(value, (tuple, list, set, frozenset)):
        return all(_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(_plain(k, depth + 1) and _plain(v, depth + 1) for k, v in value.items())
    return False
