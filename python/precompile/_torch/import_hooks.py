"""Run a callback once a module has been imported, whenever that happens: a patch to a module a process may never import."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
import types
from collections.abc import Callable, Sequence
from typing import Any

Hook = Callable[[types.ModuleType], None]


class _AfterImport(importlib.abc.MetaPathFinder):
    """A finder that asks the finders after it for a watched module's spec
    and has its loader call the hooks once the module's code has run.

    It finds nothing itself, so every import resolves exactly as it would
    without it: the same spec, loader and `__loader__`. Only the watched
    names cost more than a dict lookup. Hooks can be cancelled (a patch
    stopped by `uninstall()` before the module was imported), which the
    post-import hooks of `wrapt` do not offer.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hooks: dict[str, list[Hook]] = {}

    def add(self, name: str, hook: Hook) -> None:
        with self._lock:
            self._hooks.setdefault(name, []).append(hook)

    def remove(self, name: str, hook: Hook) -> None:
        with self._lock:
            hooks = self._hooks.get(name, [])
            if hook in hooks:
                hooks.remove(hook)
            if not hooks:
                self._hooks.pop(name, None)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self._hooks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec: importlib.machinery.ModuleSpec | None = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if loader is None or exec_module is None:
            return spec
        # The loader instance is this module's own (a path finder makes one
        # per spec): shadowing its `exec_module` touches no other import.
        watcher = self

        def run_then_notify(module: types.ModuleType) -> None:
            try:
                exec_module(module)
            finally:
                vars(loader).pop("exec_module", None)
            watcher._notify(fullname, module)

        try:
            loader.exec_module = run_then_notify  # type: ignore[method-assign]
        except (AttributeError, TypeError):  # a loader without an instance dict
            return spec
        return spec

    def _notify(self, name: str, module: types.ModuleType) -> None:
        with self._lock:
            hooks = self._hooks.pop(name, [])
        for hook in hooks:
            hook(module)


_finder = _AfterImport()
_finder_lock = threading.Lock()


def when_imported(name: str, hook: Hook) -> Callable[[], None] | None:
    """Call `hook(module)` once `name` is imported: now if it already is
    (and return None), else right after its code runs; then return a
    function that cancels the hook if it was not called yet."""
    module = sys.modules.get(name)
    if module is not None:
        hook(module)
        return None
    with _finder_lock:
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
    _finder.add(name, hook)
    # Imported by another thread between the check and the registration.
    module = sys.modules.get(name)
    if module is not None and _is_loaded(module):
        _finder.remove(name, hook)
        hook(module)
        return None
    return lambda: _finder.remove(name, hook)


def _is_loaded(module: types.ModuleType) -> bool:
    spec: Any = getattr(module, "__spec__", None)
    return not getattr(spec, "_initializing", False)
