"""Paths from a module that reach an object, for what torch cannot name.

torch's package names a compiled frame's code by its module and qualified
name, found from the code's file. A method generated with `exec`, such as a
dataclass's `__init__` (file "<string>", qualified name
`__create_fn__.<locals>.__init__`), has no file to find a module from, so torch
cannot name it, and transformers builds every model output through one. Such a
function does know where it lives: its globals are the class's module, and the
class holds it under its name (or the module, for a function `exec` defined
at module level). `owner_path` finds that path, and keeps it only
if walking it from the module reaches the very same function, so a fresh
process that looks the path up gets the method its own class generated.

A generated code has no source file, so torch's check that inlined sources are
unchanged cannot cover it; before such an entry installs, `restore.check`
compares the stored code with the one the path reaches instead (a dataclass
with another field generates other code).

A builtin or class Dynamo's generated code loads through a global it binds
(`iter`, `collections.deque`): `object_path` gives `module:qualname` for it, and
`resolve` finds it again in another process.

The same walks decide whether pickle can carry a value by reference
(`resolves_by_name`): this module is the one place that follows dotted names.
"""

from __future__ import annotations

import gc
import importlib
import sys
import types
from collections.abc import Iterator

__all__ = [
    "NOTHING",
    "generated",
    "is_object_path",
    "lookup",
    "names",
    "object_path",
    "owner_path",
    "resolve",
    "resolves_by_name",
    "walk",
]


def generated(filename: str) -> bool:
    """Whether a code's file is a name `exec` gave it rather than a file."""
    return filename.startswith("<") and filename.endswith(">")


def owner_path(code: types.CodeType) -> tuple[str, str] | None:
    """(module name, `function` or `Class.method` path) that reaches `code`'s function, or None."""
    if not generated(code.co_filename):
        return None
    # The function holding the code is the one object that knows its globals.
    # Only codes torch could not name get here, once per code and package;
    # the walk over the heap costs about 0.1 s in a process holding a small
    # transformers model (340k objects), against seconds for the compile.
    for fn in gc.get_referrers(code):
        if not isinstance(fn, types.FunctionType) or fn.__code__ is not code:
            continue
        scope = fn.__globals__
        module = sys.modules.get(scope.get("__name__", ""))
        if module is None or module.__dict__ is not scope:
            continue
        # A function bound in its module under its own name (one a notebook
        # cell or `exec` defined at module level), then a method of a class.
        if vars(module).get(code.co_name) is fn:
            return module.__name__, code.co_name
        for cls in _classes(module):
            if vars(cls).get(code.co_name) is not fn:
                continue
            path = f"{cls.__qualname__}.{code.co_name}"
            if _walk(module, path) is fn:
                return module.__name__, path
    return None


def _classes(module: types.ModuleType) -> Iterator[type]:
    """Classes defined in `module` that a dotted path from it reaches."""
    pending = [v for v in list(vars(module).values()) if isinstance(v, type)]
    seen: set[int] = set()
    while pending:
        cls = pending.pop()
        if id(cls) in seen or cls.__module__ != module.__name__ or "<locals>" in cls.__qualname__:
            continue
        seen.add(id(cls))
        yield cls
        pending.extend(v for v in list(vars(cls).values()) if isinstance(v, type))


def _walk(root: object, path: str) -> object:
    """`walk`, with None for a path that does not resolve."""
    try:
        return walk(root, path)
    except AttributeError:
        return None


def walk(root: object, dotted: str) -> object:
    """`root.a.b.c` for `dotted` "a.b.c"; AttributeError where a part is missing."""
    value = root
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def names(module_name: object, qualname: object, value: object) -> bool:
    """Whether the already imported `module_name`'s attribute path `qualname` is `value` in this process."""
    if not isinstance(module_name, str) or not isinstance(qualname, str) or "<locals>" in qualname:
        return False
    try:
        return walk(sys.modules.get(module_name), qualname) is value
    except AttributeError:
        return False


def resolves_by_name(value: object) -> bool:
    """Whether `value`'s module and qualified name lead back to `value` itself,
    so pickle can carry it by reference (a local one never does)."""
    return names(getattr(value, "__module__", None), getattr(value, "__qualname__", None), value)


# Py_TPFLAGS_HEAPTYPE: a class made at run time (in Python), not a static C type.
HEAP_TYPE = 1 << 9


# What `lookup` returns for a name no class in the MRO (or the object) holds.
NOTHING = object()


def lookup(owner: object, name: str) -> object:
    """What `owner.name` finds, without running a descriptor or `__getattr__`."""
    for klass in owner.__mro__ if isinstance(owner, type) else (owner,):
        if name in vars(klass):
            return vars(klass)[name]
    return NOTHING


def object_path(value: object) -> str | None:
    """`module:qualname` that `resolve` turns back into `value` itself, or None."""
    module_name = getattr(value, "__module__", None)
    qualname = getattr(value, "__qualname__", None)
    if not isinstance(module_name, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    path = f"{module_name}:{qualname}"
    return path if resolve(path) is value else None


def is_object_path(name: str) -> bool:
    """Whether `name` is an `object_path` rather than a module name (no module name has a colon)."""
    return ":" in name


def resolve(path: str) -> object:
    """The object `module:qualname` names (importing the module), or None."""
    module_name, _, qualname = path.partition(":")
    if not module_name or not qualname:
        return None
    try:
        module = importlib.import_module(module_name)
    except Exception:
        return None
    return _walk(module, qualname)
