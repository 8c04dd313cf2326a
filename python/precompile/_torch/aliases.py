"""Module and object aliases a compiled frame reaches, recorded so a fresh process resolves them the same way."""

from __future__ import annotations

import functools
import sys
import types
from typing import Any

from torch._dynamo.exc import PackageError
from torch._dynamo.package import CompilePackage

from .. import object_paths
from .patch import _Patch


class _ModuleAliasRecorder(_Patch):
    """Remembers which module each `___module_*` global Dynamo installs names,
    and which class each `__subclass_*` global binds.

    Dynamo deletes an installed global once the compiled code that uses it
    is dropped (its cleanup hook), e.g. when a later compile of the same code
    object (a shared decorator's `wrapper`) evicts it from the frame's cache.
    A save at exit would then find the alias unbound and could not carry it.
    Recording the module when the alias is installed keeps it for the save.

    A `torch.Tensor` subclass with `__torch_function__` is bound the same
    way (`install_global_unsafe`, as `__subclass_<Name>_<id>_c<compile id>`):
    the generated code loads it to wrap the graph's outputs in the subclass,
    and guards read the class through it. Recorded as `module:qualname`
    where that path leads back to the class.

    Torch versions: 2.11 and newer: every release deletes an installed global
    with the code that used it.
    Steps aside: `_apply` replaces nothing where
    `OutputGraph.install_global_by_id` is missing, and leaves
    `install_global_unsafe` alone where that is missing.
    """

    PREFIX = "___module_"
    SUBCLASS_PREFIX = "__subclass_"

    def __init__(self) -> None:
        super().__init__()
        self.names: dict[str, str] = {}

    def _apply(self) -> None:
        from torch._dynamo.output_graph import OutputGraph

        original = OutputGraph.__dict__.get("install_global_by_id")
        if original is None:
            return
        recorder = self

        @functools.wraps(original)
        def install_global_by_id(self: Any, prefix: str, value: Any, *args: Any, **kwargs: Any) -> Any:
            name = original(self, prefix, value, *args, **kwargs)
            if isinstance(prefix, str) and prefix.startswith(recorder.PREFIX) and isinstance(name, str):
                path = alias_target(value)
                if path is not None:
                    recorder.names[name] = path
            return name

        self._replace(OutputGraph, "install_global_by_id", install_global_by_id)

        unsafe = OutputGraph.__dict__.get("install_global_unsafe")
        if unsafe is None:
            return

        @functools.wraps(unsafe)
        def install_global_unsafe(self: Any, name: str, value: Any, *args: Any, **kwargs: Any) -> Any:
            result = unsafe(self, name, value, *args, **kwargs)
            if isinstance(name, str) and name.startswith(recorder.SUBCLASS_PREFIX) and isinstance(value, type):
                path = object_paths.object_path(value)
                if path is not None:
                    recorder.names[name] = path
            return result

        self._replace(OutputGraph, "install_global_unsafe", install_global_unsafe)


module_alias_recorder = _ModuleAliasRecorder()


def alias_target(value: Any) -> str | None:
    """What a `___module_*` alias is stored as: its module's name, or `module:qualname`.

    Dynamo binds builtins and classes under such aliases as well (`iter`,
    `range`, `collections.deque`, to rebuild an iterator live at a graph
    break); those are named by the path that reaches them.
    """
    if isinstance(value, types.ModuleType):
        name = value.__name__
        return name if sys.modules.get(name) is value else None
    return object_paths.object_path(value)


class _ObjectAliases(_Patch):
    """install() binds the `module:qualname` aliases torch's table cannot.

    torch's install() imports every `import_sources` value as a module. An
    alias of a builtin or class (`alias_target`) is kept out of that table
    while torch installs, and bound afterwards through the package, so its
    uninstall() unbinds it with the rest.

    Torch versions: 2.11 and newer: the `module:qualname` alias is precompile's
    own (FORMAT §3.3), which no torch release installs.
    Steps aside: never; `CompilePackage.install` is wrapped on every torch, and
    an entry without such aliases installs exactly as torch's.
    """

    def _apply(self) -> None:
        original = vars(CompilePackage)["install"]

        @functools.wraps(original)
        def install(package: Any, backends: Any) -> None:
            held = []
            for entry in package._codes.values():
                objects = {a: p for a, p in entry.import_sources.items() if object_paths.is_object_path(p)}
                if objects:
                    held.append((entry, entry.import_sources, objects))
                    entry.import_sources = {a: p for a, p in entry.import_sources.items() if a not in objects}
            try:
                original(package, backends)
            finally:
                for entry, sources, _ in held:
                    entry.import_sources = sources
            for entry, _, objects in held:
                module = sys.modules[entry.python_module]
                for alias, path in objects.items():
                    value = object_paths.resolve(path)
                    if value is None:
                        raise PackageError(f"{alias} names {path}, which is not found here")
                    package._install_global(module, alias, value)

        self._replace(CompilePackage, "install", install)


object_aliases = _ObjectAliases()
