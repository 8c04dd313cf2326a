"""Identity guards torch drops under `caching_precompile`: kept on enum members and on globals holding objects pickle saves by name, and stored; kept on other globals, their frame left unstored, unless a name rebinds the object. Guards on a scope only the tracing process binds: dropped where they hold by construction, else the frame left unstored."""

from __future__ import annotations

import contextlib
import enum
import functools
import inspect
import logging
import pickle
import re
import sys
import threading
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from .. import object_paths
from .custom_ops import is_registered_operator
from .guard_logs import _BY_NAME, _GLOBAL_MODULE_OR_BUILTIN
from .named_guards import serializable
from .patch import _Patch

# torch/_dynamo/guards.py: the kinds its `caching_precompile` filter drops.
_IDENTITY = ("ID_MATCH", "CLOSURE_MATCH")
_DROPPED_BY_TORCH = (*_IDENTITY, "WEAKREF_ALIVE", "DICT_VERSION")

log = logging.getLogger("torch._dynamo.guards")


def _identity_kind(entry: Any) -> str | None:
    """The identity kind of a guard torch's filter would drop, or None."""
    derived = tuple(getattr(entry, "derived_guard_types", ()) or ())
    if entry.guard_type in _DROPPED_BY_TORCH:
        return str(entry.guard_type)
    if "ID_MATCH" in derived:
        return "ID_MATCH"
    if "DICT_VERSION" in derived:
        return "DICT_VERSION"
    return None


# Where Dynamo binds the globals of an inlined function that no module owns
# (a `NamedTuple`'s generated `__new__`): `install_global_by_id` names the
# dict by its id in the tracing process, so only that process has the name.
_UNNAMED_SCOPE_ROOT = re.compile(r"G\['___unnamed_scope_\d+_c\d+'\]")


# A global Dynamo installs under a name made of an object's id and the
# compile's (`install_global_by_id`): `_139790118156096_c0`,
# `___unnamed_scope_<id>_c<n>`, `___module_<name>_<id>_c<n>`.
_BY_ID_ROOT = re.compile(r"G\['\w*_\d{6,}_c\d+'\]")


def _in_an_unnamed_scope(path: str) -> bool:
    return path.startswith("G['___unnamed_scope_")


def _under_a_global(path: str) -> bool:
    """Whether the guard reads an object under a global, other than through a
    function's closure cells: a cell of a named function (transformers'
    decorated `create_causal_mask`) is made by its definition, which the
    loading process checks by source; those guards are dropped as torch
    drops them, or the frame would never be stored."""
    return path.startswith("G[") and "__closure__" not in path


def rebound_by_name(entry: Any, scope: Mapping[str, Any]) -> bool:
    """Whether a loading process binds the guarded object again by name, so
    the identity the dropped guard checked holds there too: a module, builtin
    or function that generated code imports, a global module or builtin, or
    a value whose module and qualified name import back to it (a module-level
    function or class), the function of a class's own classmethod or
    staticmethod, the function a named decorator wrapped (`__wrapped__`),
    a builtin method its class or module binds by name,
    a function a named global class of the frame (`scope`, its globals)
    binds, one of the interpreter's static types, an enum member read
    through its own name, or the function Dynamo inlines for a named
    TorchScript function."""
    name = str(entry.name)
    if name.startswith(_BY_NAME):
        return True
    if entry.guard_type in _GLOBAL_MODULE_OR_BUILTIN and name.startswith("G["):
        return True
    if not entry.has_value:
        return False
    value = entry.value
    return (
        inspect.ismodule(value)
        or object_paths.resolves_by_name(value)
        or _function_of_a_named_class(value)
        or _wrapped_by_a_named_wrapper(value)
        or _builtin_of_a_named_owner(value)
        or _method_of_a_named_class(name, value, scope)
        or _interpreter_type(value)
        or _enum_member_read_by_name(name, value)
        or _inline_of_a_named_script_function(name, value)
    )


def _function_of_a_named_class(value: object) -> bool:
    """Whether `value` is the function a classmethod or staticmethod wraps
    (`Tensor.__torch_function__.__func__`, which Dynamo guards through a
    `torch.Tensor` subclass), its class one that imports by name: its module
    and qualified name lead to the method, not to the function, yet the
    loading process's class of that name holds its own under that name.
    Guarded code reached this way is checked by source, as any inlined
    function is."""
    if not isinstance(value, types.FunctionType):
        return False
    module = sys.modules.get(str(getattr(value, "__module__", "")))
    owner_path, _, attr = value.__qualname__.rpartition(".")
    if module is None or not owner_path or "<locals>" in owner_path:
        return False
    try:
        owner = object_paths.walk(module, owner_path)
    except AttributeError:
        return False
    if not (isinstance(owner, type) and object_paths.resolves_by_name(owner)):
        return False
    held = vars(owner).get(attr)
    return isinstance(held, (classmethod, staticmethod)) and held.__func__ is value


def _wrapped_by_a_named_wrapper(value: object) -> bool:
    """Whether `value` is a function a decorator wrapped (`functools.wraps`,
    `functools.lru_cache`), and its module and qualified name lead to the
    wrapper, whose `__wrapped__` chain leads back to it: Dynamo traces the
    wrapped function and guards it as `G['helper'].__wrapped__`. The loading
    process's wrapper of that name holds its own, whose source is checked
    as any inlined function's is."""
    if not isinstance(value, types.FunctionType):
        return False
    module = sys.modules.get(str(getattr(value, "__module__", "")))
    if module is None or "<locals>" in value.__qualname__:
        return False
    try:
        held = object_paths.walk(module, value.__qualname__)
    except AttributeError:
        return False
    # Only what the decorators stored; no attribute lookup runs user code.
    for _ in range(_WRAPPER_DEPTH):
        try:
            held = vars(held).get("__wrapped__")
        except TypeError:  # an object without a __dict__
            return False
        if held is value:
            return True
        if held is None:
            return False
    return False


# Decorators stacked on one function that `_wrapped_by_a_named_wrapper` follows.
_WRAPPER_DEPTH = 8


def _builtin_of_a_named_owner(value: object) -> bool:
    """Whether `value` is a builtin method its owner binds under its name
    (`tuple.__new__`), the owner a class or module that imports by name: it
    has no module of its own to be found by, yet `getattr(owner, name)` gives
    the one object in every process. Each `NamedTuple` calls it through a
    global of its generated `__new__` (`_tuple_new`), which Dynamo guards."""
    if not isinstance(value, types.BuiltinMethodType):
        return False
    owner = value.__self__
    if not (inspect.ismodule(owner) or (isinstance(owner, type) and object_paths.resolves_by_name(owner))):
        return False
    return getattr(owner, value.__name__, None) is value


def _interpreter_type(value: object) -> bool:
    """Whether `value` is one of the interpreter's own static types
    (`function`, `method`, `builtin_function_or_method`): one object in every
    process of the same Python, whatever binds it. Dynamo guards
    `G['nms'].__class__` before it inlines a global function (torchvision's
    detection heads); `builtins.function` names nothing, but no process has
    another `function` type."""
    return isinstance(value, type) and value.__module__ == "builtins" and not value.__flags__ & object_paths.HEAP_TYPE


def _inline_of_a_named_script_function(path: str, value: object) -> bool:
    """Whether the guard reads the Python function Dynamo inlines for a
    TorchScript function (`G['f']._torchdynamo_inline`) whose own name leads
    back to the script function: the loading process's script function of
    that name carries its own such function, the one its code means."""
    if not path.endswith("._torchdynamo_inline"):
        return False
    module = sys.modules.get(str(getattr(value, "__module__", "")))
    qualname = getattr(value, "__qualname__", None)
    if module is None or not isinstance(qualname, str) or "<locals>" in qualname:
        return False
    try:
        owner = object_paths.walk(module, qualname)
    except AttributeError:
        return False
    return getattr(owner, "_torchdynamo_inline", None) is value


def named_enum_member(value: object) -> bool:
    """Whether `value` is an enum member that a loading process finds again:
    its class imports by name and the member is the one its name gives. A
    member is one object per class and name in a process, and the guard
    state pickles it by its class, so an identity guard on it, rebuilt from
    the saved state, checks the loading process's own member."""
    if not isinstance(value, enum.Enum):
        return False
    cls = type(value)
    return object_paths.resolves_by_name(cls) and cls.__members__.get(value.name) is value


def _enum_member_read_by_name(path: str, value: object) -> bool:
    """Whether the guard reads an enum member through its own name
    (`G['Action'].NONE`, as transformers' Llama does) on a class that imports
    by name: a member is one object per class and name and is never rebound,
    so the loading process's `Action.NONE` is the one its code means. A
    global that merely holds a member (`MODE = Action.NONE`) may hold another
    one in another process: its guard stays."""
    return isinstance(value, enum.Enum) and path.endswith(f".{value.name}") and named_enum_member(value)


class _IdentityGuards(_Patch):
    """Keep the identity guards torch drops under `caching_precompile` on objects no name rebinds.

    With `caching_precompile` on (which `install()` sets), torch drops every
    ID_MATCH and CLOSURE_MATCH guard from the frame's guards, in the
    compiling process too, and saves the rest: a function that branches on
    `CHOICE is MARK`, or calls a module-level lambda `ACT`, is then served
    its compiled code when `CHOICE` or `ACT` is another object, in this
    process and in any that loads the entry (a wrong result, with only a
    warning at compile). While installed, such a guard on a global (a
    source under `G[...]`) holding an object no name rebinds (an instance, a
    lambda, a function made in a function) is kept, so the compiled code is checked as torch checks it
    without precompile, and the frame is not stored: its save is a bypass
    whose reason names the guard (`unstorable`-like, `bypassed` when loaded).
    A guard on an object a loading process binds again by name
    (`rebound_by_name`) is dropped as torch drops it, unless the guard state
    saves it by name (`_rebuilt_by_name`, a named function, class or
    builtin): then it is kept and stored, since the global may hold another
    object there. So are guards on a
    frame's locals and what they reach (transformers' decorators guard the
    closure of the function they are passed, `L['func']`, on every call):
    torch drops those, and keeping them would leave such frames unstored.
    An ID_MATCH guard on an enum member (`action is Action.NONE` on an
    argument, or on a global holding a member), whose class imports by name,
    is kept and stored: torch refuses to serialize any ID_MATCH, and the
    refusal is lifted for a guard list whose ID_MATCH guards are all such;
    the loading process rebuilds each from the saved state against its own
    member, so a call with another member is a guard failure there, as here.
    WEAKREF_ALIVE and DICT_VERSION guards are left to torch.

    Torch versions: 2.11 and newer install that filter inside
    `CheckFunctionManager.__init__` and list ID_MATCH in
    `UNSUPPORTED_SERIALIZATION_GUARD_TYPES` (enum members stay a bypass
    where that tuple is missing).
    Steps aside: `_apply` replaces nothing where `CheckFunctionManager` has no
    `__init__` taking `guard_filter_fn` and `save_guards`, or no
    `serialize_guards`.
    """

    def __init__(self) -> None:
        super().__init__()
        self._kept = threading.local()

    def _apply(self) -> None:
        from torch._dynamo.guards import CheckFunctionManager

        init = vars(CheckFunctionManager).get("__init__")
        serialize = vars(CheckFunctionManager).get("serialize_guards")
        if init is None or not callable(serialize):
            return
        try:
            signature = inspect.signature(init)
        except (TypeError, ValueError):
            return
        if "guard_filter_fn" not in signature.parameters or "save_guards" not in signature.parameters:
            return
        hook = self

        @functools.wraps(init)
        def __init__(manager: Any, *args: Any, **kwargs: Any) -> None:
            bound = signature.bind(manager, *args, **kwargs)
            # A compile that saves, or a stored state being loaded (torch
            # 2.11 builds it under the same filter, which would drop the
            # enum-member guards the save kept).
            building = bound.arguments.get("save_guards") or bound.arguments.get("runtime_global_scope") is not None
            if not (torch._dynamo.config.caching_precompile and building):
                init(manager, *args, **kwargs)
                return
            kept: dict[int, str | None] = {}
            scope = getattr(bound.arguments.get("output_graph"), "global_scope", None)
            bound.arguments["guard_filter_fn"] = _filter(
                bound.arguments.get("guard_filter_fn"), kept, scope if isinstance(scope, dict) else {}
            )
            previous = getattr(hook._kept, "guards", None)
            hook._kept.guards = kept
            try:
                # torch's own filter runs only with caching_precompile on; ours
                # replaces it for this one build, on this thread.
                with torch._dynamo.config.patch(caching_precompile=False):
                    init(*bound.args, **bound.kwargs)
            finally:
                hook._kept.guards = previous

        @functools.wraps(serialize)
        def serialize_guards(manager: Any, builder: Any, sorted_guards: Any, *args: Any, **kwargs: Any) -> Any:
            kept = getattr(hook._kept, "guards", None) or {}
            output_graph = args[0] if args else kwargs.get("output_graph")
            for guard in sorted_guards:
                reason = kept.get(id(guard))
                if reason is not None and output_graph is not None:
                    # As torch bypasses an unserializable guard; the empty
                    # state is never saved (2.11 asserts that one exists).
                    output_graph.bypass_package(f"Guard evaluation failed: {reason}")
                    return b""
            unsupported = getattr(CheckFunctionManager, "UNSUPPORTED_SERIALIZATION_GUARD_TYPES", None)
            lifted = _liftable(sorted_guards, kept) if isinstance(unsupported, tuple) else []
            # torch refuses every identity guard; the filter kept these to
            # store (they rebuild exactly from the saved state), so the
            # refusal is lifted for this one call.
            with contextlib.ExitStack() as stack:
                for kind in lifted:
                    stack.enter_context(serializable(kind))
                return serialize(manager, builder, sorted_guards, *args, **kwargs)

        self._replace(CheckFunctionManager, "__init__", __init__)
        self._replace(CheckFunctionManager, "serialize_guards", serialize_guards)


def _filter(
    user: Callable[[Sequence[Any]], Sequence[bool]] | None, kept: dict[int, str | None], scope: dict[str, Any]
) -> Callable[[Sequence[Any]], Sequence[bool]]:
    """torch's `caching_precompile` guard filter, except that an identity
    guard on a global holding an object no name rebinds is kept (recorded in `kept`, by the
    guard's id, with the reason its frame is not stored), and one the loading
    process rebuilds by name (`_kept_by_name`, `_rebuilt_by_name`) is kept
    to be stored (recorded in `kept` with no reason). `scope`: the globals of
    the frame being compiled."""

    def guard_filter_fn(entries: Sequence[Any]) -> Sequence[bool]:
        wanted = user(entries) if user is not None else [True] * len(entries)
        result = []
        for keep, entry in zip(wanted, entries):
            kind = _identity_kind(entry) if keep else None
            if keep and kind is None and _in_an_unnamed_scope(str(entry.name)):
                # Nothing in a loading process binds the scope's name: the
                # type check on it holds by construction and is dropped;
                # any other check on it would fail with a KeyError there.
                if entry.guard_type == "TYPE_MATCH" and _UNNAMED_SCOPE_ROOT.fullmatch(str(entry.name)):
                    result.append(False)
                    continue
                kept[id(entry.orig_guard)] = (
                    f"{entry.guard_type} guard on {entry.name} reads the globals of a function no module "
                    "owns, which only this process binds; the frame is compiled with the guard and not stored"
                )
                result.append(True)
            elif kind is None:
                result.append(bool(keep))
            elif _kept_by_name(entry):
                kept[id(entry.orig_guard)] = None
                result.append(True)
            elif kind in _IDENTITY and _under_a_global(str(entry.name)) and not rebound_by_name(entry, scope):
                what = type(entry.value).__name__ if entry.has_value else "object"
                kept[id(entry.orig_guard)] = (
                    f"{kind} guard on {entry.name} checks the identity of a {what} that no name binds "
                    "in another process; the frame is compiled with the guard and not stored"
                )
                result.append(True)
            elif kind in _IDENTITY and _under_a_global(str(entry.name)) and _rebuilt_by_name(entry):
                # Kept and stored: the loading process rebuilds it against its
                # own object of that name (see `_rebuilt_by_name`).
                kept[id(entry.orig_guard)] = None
                result.append(True)
            else:
                # What torch does: the same warning (guard_logs quiets the
                # names a loading process imports), and the guard dropped.
                log.warning("%s guard on %s is dropped with caching_precompile=True.", entry.guard_type, entry.name)
                result.append(False)
        return result

    return guard_filter_fn


# A guard on one attribute of a global: `G['Pair'].__new__`.
_GLOBAL_ATTRIBUTE = re.compile(r"G\['(?P<name>[A-Za-z_]\w*)'\]\.(?P<attr>[A-Za-z_]\w*)")


def _method_of_a_named_class(path: str, value: object, scope: Mapping[str, Any]) -> bool:
    """Whether the guard reads a function a global class binds under the read
    name (`G['Pair'].__new__`), the class one that imports by name: the
    loading process's class of that name binds its own, as a module binds
    its functions. A `NamedTuple`'s `__new__` is generated with a module
    of its own that does not exist, so its own names find nothing."""
    match = _GLOBAL_ATTRIBUTE.fullmatch(path)
    if match is None:
        return False
    owner = scope.get(match["name"])
    if not (isinstance(owner, type) and object_paths.resolves_by_name(owner)):
        return False
    bound = object_paths.lookup(owner, match["attr"])
    bound = getattr(bound, "__func__", bound)  # a staticmethod or classmethod
    return isinstance(bound, types.FunctionType) and bound is value


def _rebuilt_by_name(entry: Any) -> bool:
    """Whether `entry`, an identity guard on an object a loading process binds
    again by name, is kept and stored rather than dropped as torch drops it.

    Dropped, it let a global that holds another object of a name there
    (`ACT = torch.sigmoid` there, `torch.relu` here; `BLOCK` another class;
    a conditional import that falls back to another implementation) be
    served the code traced through this one, a wrong result. The guard
    state saves such an object by name, so the loading process rebuilds the
    check against its own object of that name: a Python function's by its
    `__code__` (CLOSURE_MATCH), anything else that pickles by reference (a
    module-level function or class, a builtin) by identity. A global module,
    or anything read through an import alias, stays dropped."""
    name = str(entry.name)
    # Through a global Dynamo named by an object's id (`_<id>_c<n>`, an
    # unnamed scope), which only the tracing process binds, the loading
    # process could not read the guarded object at all; such a guard is
    # dropped as before (`rebound_by_name` holds for what it reads).
    if entry.guard_type == "MODULE_MATCH" or name.startswith(_BY_NAME) or _BY_ID_ROOT.match(name):
        return False
    if not entry.has_value:
        return False
    value = entry.value
    if entry.guard_type == "CLOSURE_MATCH" and type(value) is types.FunctionType:
        return True
    return _pickled_by_name(value)


def _pickled_by_name(value: object) -> bool:
    """Whether pickle saves `value` by reference: a module-level function or
    class, or a builtin (`torch.relu`, found through the class that binds
    it), which pickle never saves otherwise."""
    if inspect.ismodule(value):
        return False
    if object_paths.resolves_by_name(value):
        return True
    if not isinstance(value, types.BuiltinFunctionType):
        return False
    try:
        pickle.dumps(value)
    except Exception:
        return False
    return True


# The identity kinds torch refuses to serialize that `_liftable` may lift
# (CLASS_MATCH is `named_class_guards`'s).
_LIFTABLE = ("ID_MATCH", "FUNCTION_MATCH", "CLOSURE_MATCH")


def _liftable(guards: Any, kept: dict[int, str | None]) -> list[str]:
    """The identity kinds whose refusal is lifted for this guard list: every
    guard of the kind (or deriving it) is one the filter kept to be stored."""
    lifted = []
    for kind in _LIFTABLE:
        of_kind = [g for g in guards if g.create_fn_name() == kind or kind in (getattr(g, "guard_types", None) or ())]
        if of_kind and all(id(g) in kept and kept[id(g)] is None for g in of_kind):
            lifted.append(kind)
    return lifted


def _kept_by_name(entry: Any) -> bool:
    """Whether `entry` is an identity guard that is kept and stored, since the
    loading process rebuilds it from the saved state against its own object
    of the same name, so it checks what it checked here:

    - an ID_MATCH on an enum member (`action is Action.NONE` on an argument,
      or on a global holding a member; `named_enum_member`). One read
      through the member's own name (`G['Action'].NONE`) holds in every
      process and is dropped as torch drops it;
    - the check Dynamo makes on the operator of a custom op it calls through
      a global (`G['my_op']._opoverload`; `is_registered_operator`), which
      pickles by name (torch's `_unpickle_op`): the frame's code calls that
      operator, so a global holding another op in the loading process fails
      the guard instead of running this one.
    """
    if not entry.has_value:
        return False
    if entry.guard_type == "BUILTIN_MATCH":
        return _under_a_global(str(entry.name)) and is_registered_operator(entry.value)
    if entry.guard_type != "ID_MATCH" or not named_enum_member(entry.value):
        return False
    return not str(entry.name).endswith(f".{entry.value.name}")


identity_guards = _IdentityGuards()
