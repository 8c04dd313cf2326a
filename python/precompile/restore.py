"""Restoring a stored entry into this process, checked before torch sees it.

`CompilePackage.install` raises from deep inside torch when a stored entry
does not fit the process that loads it: a guard state that does not unpickle
under this torch, a module that is gone, a backend that was never stored, a
source file that changed. Each of those is checked here first and becomes a
miss with its reason (see `explain`), so torch compiles the frame instead of
the user's call failing.

One fix is applied on the way in. torch files the compiled function's code
under `fn.__module__`, and install() evaluates the code's guards against that
module's globals. A function wrapped with `functools.wraps` (transformers'
`can_return_tuple`, `merge_with_config_defaults`, ...) carries the wrapped
function's `__module__`, not the module its code runs in, so every global
guard of the stored code looked in the wrong namespace and failed (a
`KeyError` on a name the right module has): the entry was found and never
used. The cold process evaluated those same guards against the frame's own
globals, `fn.__globals__`; restoring records that module, so the stored
guards see what they saw then. No guard is dropped or relaxed.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from collections.abc import Callable
from typing import Any

from . import _torch as tc
from . import explain, module_aliases

__all__ = [
    "RestoreError",
    "check",
    "prepare",
    "with_defining_module",
]


class RestoreError(Exception):
    """A stored entry cannot be restored here; `reason` names why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def with_defining_module(fn: Callable[..., Any], entry: tc.PrecompileCacheEntry) -> tc.PrecompileCacheEntry:
    """`entry` with its main code filed under the module `fn`'s code runs in.

    Returns `entry` itself when the recorded module is already that one (or
    when it cannot be told); otherwise a copy, torch's objects untouched.
    """
    target = tc.innermost_fn(fn)
    scope = getattr(target, "__globals__", None)
    name = scope.get("__name__") if isinstance(scope, dict) else None
    main = entry.dynamo.codes[0] if entry.dynamo.codes else None
    if main is None or not isinstance(name, str) or name == main.python_module:
        return entry
    module = sys.modules.get(name)
    if module is None or module.__dict__ is not scope:
        return entry
    codes = [dataclasses.replace(main, python_module=name), *entry.dynamo.codes[1:]]
    dynamo = dataclasses.replace(entry.dynamo, codes=codes)
    return tc.PrecompileCacheEntry(dynamo=dynamo, backends=entry.backends)


def check(entry: tc.PrecompileCacheEntry) -> None:
    """Raise `RestoreError` unless install() can restore every part of `entry`."""
    name = entry.dynamo.fn_name
    try:
        changed = tc.changed_sources(entry.dynamo)
    except Exception as e:
        raise RestoreError("module_missing", f"{name}: a source it inlined does not import here ({e})") from e
    if changed:
        raise RestoreError(
            "source_changed",
            f"{name}: source changed since it was compiled: {', '.join(changed[:3])}",
        )
    for code in entry.dynamo.codes:
        try:
            importlib.import_module(code.python_module)
        except Exception as e:
            raise RestoreError(
                "module_missing",
                f"{name}: module {code.python_module!r} does not import here ({e})",
            ) from e
        if code.bypassed:
            continue
        unbound = module_aliases.unresolved(code, sys.modules[code.python_module].__dict__)
        if unbound:
            raise RestoreError(
                "unresolved_global",
                f"{name}: the compiled code loads {unbound[0]}, a module alias that was not stored",
            )
        for bid in code.backend_ids:
            if bid not in entry.backends:
                raise RestoreError("missing_backend", f"{name}: backend {bid} is not in the entry")
        for i, guarded in enumerate(tc.guarded_variants(code)):
            try:
                tc.load_guards_state(guarded.guards_state)
            except Exception as e:
                raise RestoreError(
                    "guards_unreadable",
                    f"{name}: the guards of compiled variant {i} do not unpickle under torch "
                    f"{tc.TORCH_VERSION} ({type(e).__name__}: {e})",
                ) from e


def prepare(fn: Callable[..., Any], key: str, entry: tc.PrecompileCacheEntry) -> tc.PrecompileCacheEntry | None:
    """`entry` ready for torch to install for `fn`, or None (a miss, with its reason)."""
    entry = with_defining_module(fn, entry)
    try:
        check(entry)
    except RestoreError as e:
        explain.miss(e.reason, key, str(e), fn=fn)
        return None
    explain.loaded(key, entry, fn=fn)
    return entry
