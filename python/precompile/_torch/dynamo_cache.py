"""torch's DynamoCache and PrecompileContext: swapping the cache, what torch recorded, and the copies the store saves."""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import os
import sys
from collections import ChainMap
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch._dynamo.package as dynamo_package
from torch._dynamo.package import CompilePackage, _DynamoCacheEntry
from torch._dynamo.precompile_context import BackendCacheArtifact, PrecompileContext

from .kernels import inductor_cache_dir
from .op_free_graphs import noop_graph_backends
from .patch import _Patch

log = logging.getLogger(__name__)


def check_loaded_entry(dynamo: Any, backends: dict[Any, Any]) -> None:
    """Raise TypeError unless `dynamo` and `backends`, as unpickled from a
    stored entry, have the types torch's install reads: a Dynamo cache entry
    of code entries, and backend cache artifacts. Anything else would fail
    inside torch (an AttributeError in the user's call)."""
    if not isinstance(dynamo, _DynamoCacheEntry):
        raise TypeError(f"the Dynamo record unpickled to {type(dynamo).__qualname__}, not a Dynamo cache entry")
    codes = getattr(dynamo, "codes", None)
    if not isinstance(codes, list) or not all(isinstance(c, dynamo_package._DynamoCodeCacheEntry) for c in codes):
        raise TypeError("the Dynamo cache entry's codes are not Dynamo code entries")
    if not isinstance(dynamo.device_type, str):
        raise TypeError("the Dynamo cache entry's device type is not a string")
    for bid, artifact in backends.items():
        if not isinstance(artifact, BackendCacheArtifact):
            raise TypeError(f"backend {bid} unpickled to {type(artifact).__qualname__}, not a backend artifact")


def record_for_mega_cache(key: str, pickled_entry: bytes) -> None:
    """Record a pickled entry as torch's own DynamoCache does, so that
    `torch.compiler.save_cache_artifacts()` carries it.

    Newer torch records through `CacheArtifactRecorder`; older releases call
    `CacheArtifactManager.record_artifact` directly.
    """
    import torch.compiler._cache as cache

    kind = dynamo_package.PrecompileCacheArtifact.type()
    recorder = getattr(cache, "CacheArtifactRecorder", None)
    if recorder is not None:
        recorder(kind, key).record(pickled_entry)
    else:
        cache.CacheArtifactManager.record_artifact(kind, key, pickled_entry)


def caches_disabled() -> bool:
    """torch's `torch.compiler.config.force_disable_caches`, which
    `TORCHINDUCTOR_FORCE_DISABLE_CACHES=1` (or `TORCH_COMPILE_FORCE_DISABLE_CACHES=1`)
    sets: torch then neither reads nor writes its caches, and the store neither
    loads nor saves."""
    config = getattr(torch.compiler, "config", None)
    return bool(getattr(config, "force_disable_caches", False))


def debug_info(entries: dict[str, Any], backends: dict[Any, Any]) -> dict[str, Any]:
    """What torch's `PrecompileContext.save_to_dynamo_cache()` returns for these records."""
    return PrecompileContext.dump_debug_info(entries, backends)


def bypassed_copy(entry: _DynamoCacheEntry, bypass: set[int]) -> _DynamoCacheEntry:
    """`entry` with the codes at indices `bypass` marked bypassed.

    torch's own stitching sets `bypassed` on the live code entry; the live
    entry belongs to the compiling process (a later save would see the mark),
    so this copies instead.
    """
    if not bypass:
        return entry
    codes = [dataclasses.replace(code, bypassed=True) if i in bypass else code for i, code in enumerate(entry.codes)]
    return dataclasses.replace(entry, codes=codes)


def entry_source_location(entry: _DynamoCacheEntry) -> tuple[str | None, str | None, int | None]:
    """The compiled function's qualified name, source file and first line."""
    qualname = getattr(entry, "fn_name", None)
    line = getattr(entry, "fn_first_lineno", None)
    source_file = None
    for code in entry.codes:
        module = sys.modules.get(getattr(code, "python_module", ""))
        source_file = getattr(module, "__file__", None)
        if source_file:
            break
    if not source_file:
        # The module is gone or has no file (a `__main__` that was replaced or
        # torn down): the compiled code still names the file it came from.
        for code in entry.codes:
            filename = getattr(getattr(code, "python_code", None), "co_filename", None)
            if isinstance(filename, str) and filename and not filename.startswith("<"):
                source_file = filename
                break
    try:
        line = int(line) if line is not None else None
    except (TypeError, ValueError):
        line = None
    return qualname, source_file, line


def set_caching_precompile(on: bool) -> Callable[[], None]:
    """Turn `caching_precompile` on or off in every thread; returns what puts
    the previous setting back.

    Newer torch keeps each config assignment in a ContextVar: set in the
    thread that calls `install()`, the flag stays off in every other thread,
    so a compiled model first called from a worker thread (a serving
    process's request pool) neither loaded nor recorded anything, with
    torch's store as with this one. Where assignments are per-thread, the
    flag's default, which a thread without an assignment of its own reads,
    is set too.
    """
    config = torch._dynamo.config
    before = bool(config.caching_precompile)
    found = getattr(config, "_config", {}).get("caching_precompile")
    per_thread = isinstance(getattr(found, "user_override", None), contextvars.ContextVar)
    entry: Any = found if per_thread and hasattr(found, "default") else None
    default = entry.default if entry is not None else None
    if entry is not None:
        entry.default = on
    config.caching_precompile = on

    def restore() -> None:
        if entry is not None:
            entry.default = default
        config.caching_precompile = before

    return restore


def default_dynamo_dir() -> str:
    """Where torch's own DiskDynamoCache keeps its entries."""
    return os.path.join(inductor_cache_dir(), "dynamo")


def source_id_from_fn(fn: Callable[..., Any]) -> str:
    """The key torch's DynamoCache files a compiled function under."""
    return CompilePackage.source_id_from_fn(fn)


# Every method of torch's DynamoCache that reads or writes entries.
_DYNAMO_CACHE_METHODS = (
    "clear",
    "write",
    "_write_to_local_cache",
    "read",
    "save_cache_entry",
    "save_package",
    "load_cache_entry",
    "load_package",
    "save",
    "load",
    "load_and_install_package",
    "path_prefix",
    "record_package",
)


def swap_dynamo_cache(new: Any) -> Any:
    """Make torch's DynamoCache object act as `new` (None: as itself again).

    Code that imported the object before the swap (`from
    torch._dynamo.package import DynamoCache`, as precompile_context and
    user code do) holds the object, not the name, so the object itself is
    changed: its entry methods become `new`'s, as instance attributes that
    shadow its class's. Returns the object.
    """
    cache = dynamo_package.DynamoCache
    for name in _DYNAMO_CACHE_METHODS:
        cache.__dict__.pop(name, None)
        if new is not None and hasattr(new, name):
            setattr(cache, name, getattr(new, name))
    return cache


def innermost_fn(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The function `torch.compile` wraps, under its decorators."""
    from torch._dynamo.eval_frame import innermost_fn as _innermost

    return _innermost(fn)


def recompiles_log() -> logging.Logger:
    """torch's `recompiles` artifact logger: `TORCH_LOGS=recompiles` shows it."""
    from torch._logging._internal import getArtifactLogger

    return getArtifactLogger("torch._dynamo.guards", "recompiles")


def recorded_entries() -> dict[str, _DynamoCacheEntry]:
    """The Dynamo entries torch recorded in this process, by key (live: not a copy)."""
    entries: dict[str, _DynamoCacheEntry] = PrecompileContext._dynamo_cache_entries
    return entries


def recorded_backends() -> Mapping[Any, Any]:
    """The backend artifacts torch recorded in this process, by backend id,
    with the no-op graphs torch records none for (see `noop_graph_backends`);
    a live view, not a copy."""
    return ChainMap(PrecompileContext._backend_artifacts_by_key, noop_graph_backends.artifacts)


def package_function(package: Any) -> Callable[..., Any] | None:
    """The function a `CompilePackage` was made for, or None."""
    return getattr(package, "_innermost_fn", None)


def guarded_variants(code_entry: Any) -> list[Any]:
    """A stored code's variants: one per guard set Dynamo compiled it for."""
    return list(code_entry.guarded_codes)


def loaded_variant_count(dynamo_entry: Any) -> int:
    """How many compiled variants an entry's codes that are not bypassed hold."""
    return sum(len(code.guarded_codes) for code in dynamo_entry.codes if not code.bypassed)


class _SaveToDynamoCache(_Patch):
    """Routes `PrecompileContext.save_to_dynamo_cache()` through the store.

    torch's `save_cache_artifacts()` saves precompile entries by calling this
    class method, which writes to torch's own DynamoCache only. While installed
    it stitches and stores the store's way, and the entries also travel in the
    Mega-Cache blob. Callers get torch's own return value (the debug info of
    what PrecompileContext recorded), with the store's report under the key
    "precompile".

    Torch versions: 2.11 and newer: torch's save writes to its own
    DynamoCache only.
    Steps aside: `_apply` replaces nothing where `PrecompileContext` has no
    `save_to_dynamo_cache` of its own.
    """

    def __init__(self) -> None:
        super().__init__()
        self._save: Callable[[], dict[str, Any]] | None = None

    def set_save(self, save: Callable[[], dict[str, Any]]) -> None:
        """What to run on a save: returns the report added under `precompile`."""
        self._save = save

    def _apply(self) -> None:
        if "save_to_dynamo_cache" not in vars(PrecompileContext):
            return
        hook = self

        def save_to_dynamo_cache(cls: Any) -> dict[str, Any]:
            # torch's return value: the backends torch itself recorded.
            info = debug_info(recorded_entries(), PrecompileContext._backend_artifacts_by_key)
            if hook._save is not None:
                info["precompile"] = hook._save()
            return info

        self._replace(PrecompileContext, "save_to_dynamo_cache", classmethod(save_to_dynamo_cache))


save_to_dynamo_cache = _SaveToDynamoCache()
