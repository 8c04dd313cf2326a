"""The `_Patch` base: an adaptation of torch that holds while a store is installed, and steps aside when torch needs none."""

from __future__ import annotations

import importlib.util
import os
import re
import types
from collections.abc import Callable
from typing import Any

from .import_hooks import when_imported

OFF_ENV = "PRECOMPILE_PATCHES_OFF"


def names_turned_off() -> frozenset[str]:
    """The names `OFF_ENV` lists (comma-separated, blanks ignored), unchecked:
    the registry checks them against its patches."""
    return frozenset(n.strip() for n in os.environ.get(OFF_ENV, "").split(",") if n.strip())


def source_block(module: str, pattern: str) -> str | None:
    """The first block of `module`'s source file that `pattern` (multiline,
    dot-all) matches, whitespace removed; read without importing the module,
    so a patch can check which known body a torch has before it imports
    anything heavy. None where the file or the block is missing."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return None
    try:
        with open(spec.origin, encoding="utf-8") as f:
            source = f.read()
    except OSError:
        return None
    match = re.search(pattern, source, re.S | re.M)
    return None if match is None else re.sub(r"\s+", "", match.group(0))


class _Patch:
    """An adaptation of torch that holds while a store is installed.

    A subclass replaces attributes of torch's classes and modules in
    `_apply`, each through `_replace`, which keeps the original; `stop()`
    puts every original back, last replaced first. `_apply` may replace
    nothing (a torch that needs no adaptation, or one it does not know):
    the patch then stays inactive. Starting an active patch does nothing.

    A patch to a module a process may never import (Triton's runtime on a
    CPU-only start) waits for it through `_after_import`, and counts as
    active meanwhile: it holds from the moment that module exists.

    `name` is the module-level instance's name; the class docstring's first
    line is its summary (`needed_because`).
    """

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []
        self._waiting: list[Callable[[], None]] = []  # cancels of `_after_import` hooks

    @property
    def active(self) -> bool:
        return bool(self._saved) or bool(self._waiting)

    def start(self) -> None:
        if not self.active:
            self._apply()

    def stop(self) -> None:
        while self._waiting:
            self._waiting.pop()()
        while self._saved:
            owner, name, original = self._saved.pop()
            setattr(owner, name, original)
        self._stopped()

    def original(self, owner: Any, name: str) -> Any:
        """What `owner.name` was before this patch replaced it."""
        for saved_owner, saved_name, original in self._saved:
            if saved_owner is owner and saved_name == name:
                return original
        raise KeyError(name)

    def _apply(self) -> None:
        raise NotImplementedError

    def _stopped(self) -> None:
        """Drop what the patch kept while active."""

    def _after_import(self, module: str, apply: Callable[[types.ModuleType], None]) -> None:
        """Run `apply(module)` now if `module` is imported, else once it is
        (unless the patch was stopped first)."""
        pending: list[Callable[[], None]] = []

        def run(imported: types.ModuleType) -> None:
            for cancel in pending:
                if cancel in self._waiting:
                    self._waiting.remove(cancel)
            apply(imported)

        cancel = when_imported(module, run)
        if cancel is not None:
            pending.append(cancel)
            self._waiting.append(cancel)

    def _replace(self, owner: Any, name: str, value: Any) -> Any:
        """Set `owner.name` to `value` (a class or module's own attribute,
        descriptor and all) and return the original."""
        original = vars(owner)[name]
        self._saved.append((owner, name, original))
        setattr(owner, name, value)
        return original
