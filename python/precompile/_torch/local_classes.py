"""Instances of classes torch cannot name: a class a module-level name reaches, saved by that name and checked by its code.

torch refuses to save any value whose class's qualified name is not its plain
name: a TYPE_MATCH guard on one is marked unserializable and the frame is
bypassed (every start compiles it again). Two kinds are safe to carry:

- a nested class that imports by name (`Outer.Inner`): pickle names it;
- a class made inside a function whose product a module binds: the `kernels`
  package turns each hub function transformers decorates into an instance of
  a class made per function (`_create_func_module.<locals>.Func`, with its
  `__module__` set to the decorated function's), binds the instance under the
  function's name (`modeling_llama.apply_rotary_pos_emb`), and gives every
  attention module a private instance of the same class. With `kernels`
  installed, every transformers decoder's attention frame was bypassed.

Such a class is saved as the module-level name that reaches it (the name
holds the class or an instance of it) with its qualified name and a digest of
its code (`class_digest`). The loading process takes the class that name
reaches there and refuses the guard state unless it has the same module,
qualified name and digest (`stored._resolve_local_class`): the type guard
then checks identity against the loading process's class made by the same
code, as it checks a class that imports by name. An instance a guard reads is
saved with its class so referenced and its attributes as torch keeps them (a
module's pruned as torch prunes any module's), and rebuilt without running
its class's `__init__` or `__setstate__`; an instance no guard reads is
torch's `_Missing` placeholder.
"""

from __future__ import annotations

import copyreg
import hashlib
import sys
import types
from typing import Any

import torch

from .. import object_paths
from .named_guards import lifting_marks, marked_type_guard_value
from .parametrized import _prune_like_torch
from .patch import _Patch
from .stored import _new_instance, _resolve_local_class, _set_module_state

# The data kinds whose repr is stable across processes (no id, no hash order).
_DATA = (bool, int, float, complex, str, bytes, type(None))


def _local(cls: type) -> bool:
    return cls.__qualname__ != cls.__name__


def _const_digest(value: Any, h: Any) -> None:
    if isinstance(value, types.CodeType):
        _code_digest(value, h)
    elif isinstance(value, (tuple, frozenset)):
        # A frozenset's order follows string hashing, which differs per process.
        items = value if isinstance(value, tuple) else sorted(value, key=repr)
        h.update(f"{type(value).__name__}{len(value)}(".encode())
        for item in items:
            _const_digest(item, h)
        h.update(b")")
    else:
        h.update(repr(value).encode() if isinstance(value, _DATA) else type(value).__qualname__.encode())


def _code_digest(code: types.CodeType, h: Any) -> None:
    """What a code object does, not where its file lives: bytecode, names and
    constants (line numbers and file paths differ between hosts)."""
    h.update(code.co_code)
    h.update(repr((code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars)).encode())
    for const in code.co_consts:
        _const_digest(const, h)


def _value_digest(value: Any, h: Any, depth: int = 0) -> None:
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, types.FunctionType):
        _code_digest(value.__code__, h)
        # A function a class makes per call closes over what it was made
        # for (kernels' `Func.forward` over the decorated function).
        for cell in (value.__closure__ or ()) if depth < 1 else ():
            try:
                contents = cell.cell_contents
            except ValueError:
                continue
            _value_digest(contents, h, depth + 1)
    elif isinstance(value, _DATA):
        h.update(repr(value).encode())
    else:
        h.update(type(value).__qualname__.encode())


def class_digest(cls: type) -> str:
    """A digest of the code and data a class defines itself (and of its
    bases' names): equal in two processes that made the class by the same code."""
    h = hashlib.blake2b(digest_size=16)
    h.update(repr([f"{b.__module__}.{b.__qualname__}" for b in cls.__mro__[1:]]).encode())
    for name in sorted(vars(cls)):
        if name in ("__dict__", "__weakref__", "__module__", "__qualname__", "__doc__"):
            continue
        h.update(name.encode())
        _value_digest(vars(cls)[name], h)
    return h.hexdigest()


def witness(cls: type) -> str | None:
    """A name in `cls`'s module that holds `cls` or an instance of it, or None."""
    module = sys.modules.get(getattr(cls, "__module__", None) or "")
    if module is None:
        return None
    instance = None
    for name, value in list(vars(module).items()):
        if value is cls:
            return name
        if instance is None and type(value) is cls:
            instance = name
    return instance


def reference(cls: type) -> tuple[str, str, str, str] | None:
    """(module, name, qualname, digest) that `stored._resolve_local_class`
    turns back into `cls`, for a local class a module-level name reaches; None
    for any other class."""
    name = _reaching_name(cls)
    return None if name is None else (cls.__module__, name, cls.__qualname__, class_digest(cls))


def _reaching_name(cls: type) -> str | None:
    """`witness` for a class torch cannot name and pickle cannot either."""
    if not _local(cls) or object_paths.resolves_by_name(cls):
        return None
    return witness(cls)


def _nested(cls: type) -> bool:
    """Whether `cls` is a class defined in a class body that imports by name
    (`Outer.Inner`). A C type whose qualified name spells its module path
    (pybind's `torch.jit.ScriptFunction`) is not one."""
    owner, dot, _ = cls.__qualname__.rpartition(".")
    if not dot or not object_paths.resolves_by_name(cls):
        return False
    module = sys.modules.get(cls.__module__)
    try:
        return isinstance(object_paths.walk(module, owner), type)
    except AttributeError:
        return False


def carried(cls: type) -> bool:
    """Whether a store's guard state carries `cls` by name: a nested class
    that imports by name, or a local class a module-level name reaches
    (`reference`)."""
    return _nested(cls) or _reaching_name(cls) is not None


def local_instance_rule(pickler: Any, obj: Any) -> Any:
    """The reduction of a local class (see the module docstring) or of an
    instance of a carried local class; None for anything else."""
    if isinstance(obj, type):
        if not _local(obj):
            return None
        ref = reference(obj)
        return None if ref is None else (_resolve_local_class, ref)
    cls = type(obj)
    if not _local(cls) or isinstance(obj, tuple) or not carried(cls):
        return None
    read = getattr(pickler, "guard_tree_values", None)
    if read is None:
        return None
    if id(obj) in getattr(pickler, "missing_values", {}) or id(obj) in getattr(pickler, "empty_values", {}):
        return None  # torch's placeholders
    if id(obj) not in read:
        from torch._dynamo import guards

        placeholder = getattr(guards, "_Missing", None)
        return None if placeholder is None else (placeholder, (f"unguarded {cls.__name__}",))
    if isinstance(obj, torch.nn.Module):
        _prune_like_torch(pickler, obj)
        return _new_instance, (cls,), dict(vars(obj)), None, None, _set_module_state
    own = vars(object)
    if cls.__reduce_ex__ is not own["__reduce_ex__"] or cls.__reduce__ is not own["__reduce__"]:
        return None  # its own reduction: torch's refusal stands
    reduced = obj.__reduce_ex__(2)
    if not isinstance(reduced, tuple) or reduced[0] is not getattr(copyreg, "__newobj__", None):
        return None
    return reduced


class _LocalClassTypeGuards(_Patch):
    """A type guard on an instance of a class torch cannot name is saved where the store carries the class.

    torch marks TYPE_MATCH on any class whose qualified name differs from its
    name unserializable and bypasses the frame. While installed, the mark is
    lifted for the one call that serializes a guard list, from each such
    guard whose class the store carries (`carried`: a nested class that
    imports by name, or a local class a module-level name reaches, saved with
    a digest of its code); the guard is then rebuilt as an identity check on
    the class the loading process resolves, exactly as for a class that
    imports by name. One on any other class is left to torch (a bypass).

    Torch versions: 2.11 and newer: every release marks such guards
    (`Guard._unserializable`).
    Steps aside: `_apply` replaces nothing where `serialize_guards` is missing.
    """

    def _apply(self) -> None:
        from torch._dynamo.guards import CheckFunctionManager

        serialize = vars(CheckFunctionManager).get("serialize_guards")
        if not callable(serialize):
            return

        self._replace(CheckFunctionManager, "serialize_guards", lifting_marks(serialize, _types_a_carried_class))


def _types_a_carried_class(builder: Any, guard: Any) -> bool:
    """Whether `guard` is a type guard torch marked unserializable only for
    its class's qualified name, on a class the store carries."""
    value = marked_type_guard_value(builder, guard)
    if value is object_paths.NOTHING:
        return False
    if isinstance(value, torch._subclasses.FakeTensor) and value.pytype:
        cls = value.pytype
    else:
        cls = type(value)
    return _local(cls) and carried(cls)


local_class_type_guards = _LocalClassTypeGuards()
