"""Guards on classes and TorchScript functions that a fresh process can check by name."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .. import object_paths
from .patch import _Patch


def _named_class(value: Any) -> bool:
    """Whether `value` is a class that pickles by reference."""
    return isinstance(value, type) and object_paths.resolves_by_name(value)


class _NamedClassGuards(_Patch):
    """Serialize CLASS_MATCH guards on classes that are importable by name.

    torch refuses to serialize any CLASS_MATCH guard (an identity check on a
    class, e.g. transformers' encoder-decoders guard `type(self.config)`) and
    saves such a frame without compiled code, so no cache can serve it. For a
    class that pickles by reference the guard carries across processes
    exactly as TYPE_MATCH does, which torch does serialize: the loading
    process rebuilds it from the saved scope, where the class is the one its
    name imports, and checks identity against it. While installed, a guard
    list whose CLASS_MATCH guards are all on such classes is serialized;
    anything else (a local class, a CLASS_MATCH only derived from another
    guard) is refused as torch refuses it. No guard is dropped or weakened.

    Torch versions: 2.11 and newer: every release so far lists CLASS_MATCH among
    `UNSUPPORTED_SERIALIZATION_GUARD_TYPES`.
    Steps aside: `_apply` replaces nothing where that tuple is missing or no
    longer names CLASS_MATCH (a torch that serializes them), or
    `serialize_guards` is missing.
    """

    def _apply(self) -> None:
        from torch._dynamo.guards import CheckFunctionManager

        unsupported = getattr(CheckFunctionManager, "UNSUPPORTED_SERIALIZATION_GUARD_TYPES", None)
        original = CheckFunctionManager.__dict__.get("serialize_guards")
        if not isinstance(unsupported, tuple) or "CLASS_MATCH" not in unsupported or original is None:
            return  # a torch that serializes them already, or that we do not know

        @functools.wraps(original)
        def serialize_guards(self: Any, builder: Any, sorted_guards: Any, *args: Any, **kwargs: Any) -> Any:
            if not all_guards_of_kind_accepted(builder, sorted_guards, "CLASS_MATCH", _named_class):
                return original(self, builder, sorted_guards, *args, **kwargs)
            with serializable("CLASS_MATCH"):
                return original(self, builder, sorted_guards, *args, **kwargs)

        self._replace(CheckFunctionManager, "serialize_guards", serialize_guards)


# Guards one tuple that several patches narrow for a call.
_unsupported_lock = threading.RLock()


@contextlib.contextmanager
def serializable(kind: str) -> Iterator[None]:
    """torch's refusal of every `kind` guard at serialization lifted for the
    calls inside; a caller first checks each such guard can be carried."""
    from torch._dynamo.guards import CheckFunctionManager

    with _unsupported_lock:
        kept = CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES
        CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES = tuple(t for t in kept if t != kind)
        try:
            yield
        finally:
            CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES = kept


def all_guards_of_kind_accepted(
    builder: Any, guards: Any, kind: str, accepts: Callable[[Any], bool], also: tuple[str, ...] = ()
) -> bool:
    """True when the list has `kind` guards (or guards of the kinds `also`
    names, which derive one), `accepts` takes the value each one checks, and
    no other guard merely derives a `kind` guard."""
    found = False
    for guard in guards:
        derived = tuple(guard.guard_types) if getattr(guard, "guard_types", None) else ()
        if guard.create_fn_name() == kind or guard.create_fn_name() in also:
            try:
                value = builder.get(guard)
            except Exception:
                return False
            if not accepts(value):
                return False
            found = True
        elif kind in derived:
            return False
    return found


named_class_guards = _NamedClassGuards()


class _ScriptFunctionTypeGuards(_Patch):
    """The type guard of a module-level TorchScript function is serialized.

    Dynamo inlines a `torch.jit.script` function through the Python function
    it was scripted from and guards the global's type (`TYPE_MATCH` on
    `G['scaled_size_sqrt']` in DeBERTa-v2). torch takes the type for a local
    class (pybind names it `torch.jit.ScriptFunction`, a qualified name that
    differs from its name) and bypasses the frame on every version, so no
    cache can serve it. The type is torch's own, the same in every process,
    and the function itself is saved by name (`_script_function_by_name`):
    while installed, the mark is lifted from such a guard for the one call
    that serializes it. One that does not resolve by name is left to torch (a
    bypass).

    Torch versions: 2.11 and newer: every release bypasses such a frame.
    Steps aside: `_apply` replaces nothing where `torch.jit.ScriptFunction` is
    not a class or `serialize_guards` is missing.
    """

    def _apply(self) -> None:
        from torch._dynamo.guards import CheckFunctionManager

        script_function = getattr(torch.jit, "ScriptFunction", None)
        serialize = vars(CheckFunctionManager).get("serialize_guards")
        if not callable(serialize) or not isinstance(script_function, type):
            return

        def applies(builder: Any, guard: Any) -> bool:
            return _types_a_named_script_function(builder, guard, script_function)

        self._replace(CheckFunctionManager, "serialize_guards", lifting_marks(serialize, applies))


def lifting_marks(serialize: Any, applies: Any) -> Any:
    """`serialize_guards` that lifts torch's unserializable mark from each
    guard `applies(builder, guard)` picks, for the one call."""

    @functools.wraps(serialize)
    def serialize_guards(self: Any, builder: Any, sorted_guards: Any, *args: Any, **kwargs: Any) -> Any:
        # The guards are this compile's own objects: the mark is lifted for
        # the one call that serializes them, then put back.
        lifted = [g for g in sorted_guards if applies(builder, g)]
        marks = [g._unserializable for g in lifted]
        for guard in lifted:
            guard._unserializable = None
        try:
            return serialize(self, builder, sorted_guards, *args, **kwargs)
        finally:
            for guard, mark in zip(lifted, marks):
                guard._unserializable = mark

    return serialize_guards


script_function_type_guards = _ScriptFunctionTypeGuards()


def _types_a_named_script_function(builder: Any, guard: Any, script_function: type) -> bool:
    """Whether `guard` is a type guard torch marked unserializable only because
    it checks the type of a script function `_script_function_name` names."""
    value = marked_type_guard_value(builder, guard)
    return type(value) is script_function and _script_function_name(value) is not None


def marked_type_guard_value(builder: Any, guard: Any) -> Any:
    """The value a type guard torch marked unserializable checks;
    `object_paths.NOTHING` for any other guard, or where it cannot be read."""
    if not getattr(guard, "_unserializable", None) or guard.create_fn_name() not in ("TYPE_MATCH", "BUILTIN_MATCH"):
        return object_paths.NOTHING
    try:
        return builder.get(guard)
    except Exception:
        return object_paths.NOTHING


def _script_function_name(fn: Any) -> tuple[str, str] | None:
    """The (module, qualified name) that import back to script function `fn`."""
    source = getattr(fn, "_torchdynamo_inline", None)  # the function it was scripted from
    module_name = getattr(source, "__module__", None)
    qualname = getattr(source, "__qualname__", None)
    return (module_name, qualname) if object_paths.names(module_name, qualname, fn) else None  # type: ignore[return-value]
