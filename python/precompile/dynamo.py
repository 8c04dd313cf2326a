"""A drop-in replacement for torch's DynamoCache, backed by the store.

`install()` points torch at a `StoreDynamoCache`: `torch.compile` under
`torch._dynamo.config.caching_precompile = True` then loads entries from the
store, and saves (`precompile.save()`, `torch.compiler.save_cache_artifacts()`
or, by default, at interpreter exit) go into it.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import os
import pickle
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from . import _torch as tc
from . import explain, host_keys, restore
from .context import PrecompileWarning, SaveReport, complete_backends, save_context, stitch
from .entries import REF_PREFIX, entry_ref, fetch_entry, find_entry, find_lineage_entries, lookup_refs, put_entry
from .paths import default_store_path
from .protocols import ReadStore, WriteStore

__all__ = [
    "StoreDynamoCache",
    "default_store_path",
    "install",
    "installed",
    "save",
    "uninstall",
]

log = logging.getLogger(__name__)

DISABLE_ENV = "PRECOMPILE_DISABLE"


def disabled() -> bool:
    """Whether the store is switched off for now: `PRECOMPILE_DISABLE=1`, or
    torch's own caches are (`TORCHINDUCTOR_FORCE_DISABLE_CACHES=1`, i.e.
    `torch.compiler.config.force_disable_caches`).

    Read at each load and save, so either can change while installed.
    Switched off, nothing is loaded (torch compiles, as with no store) and
    nothing is saved; `install()` still succeeds.
    """
    return os.environ.get(DISABLE_ENV, "").strip().lower() not in ("", "0", "false", "no") or tc.caches_disabled()


def _record_for_mega_cache(key: str, entry: tc.PrecompileCacheEntry) -> None:
    """Hand an entry to torch's Mega-Cache (`save_cache_artifacts`).

    Mega-Cache carries torch's own pickle of the entry, so the receiving
    process can load it with or without precompile installed; with it
    installed, `_write_to_local_cache` turns it back into store form.
    """
    tc.record_for_mega_cache(key, pickle.dumps(entry))


class StoreDynamoCache(tc.DynamoStore):
    """torch's DynamoStore interface over a precompile `Store`."""

    def __init__(self, store: ReadStore, writable: WriteStore | None = None) -> None:
        from .layers import writable_of

        self.store = store
        # Reads go through every layer; writes only to the writable store.
        self.writable = writable_of(store) if writable is None else writable

    # -- the DiskDynamoCache surface -------------------------------------
    def path_prefix(self) -> str:
        return str(self.store.path)

    def clear(self) -> None:
        """Forget every entry; `gc` reclaims the space."""
        for name in self.writable.refs(REF_PREFIX):
            self.writable.delete_ref(name)

    def write(self, cache_entry: tc.PrecompileCacheEntry, path: str) -> None:
        """Store `cache_entry` under key `path` and record it for Mega-Cache."""
        if disabled():
            return
        try:
            put_entry(self.writable, cache_entry, path)
        except Exception as e:
            raise RuntimeError(f"Failed to save package to {path}: {e}") from e
        _record_for_mega_cache(path, cache_entry)
        self.push([entry_ref(path, cache_entry.dynamo.device_type)])

    def push(self, refs: Sequence[str]) -> None:
        """Upload saved entries (their ref names) to the remote, if there is one; a fault only warns."""
        remote = getattr(self.store, "remote", None)
        if remote is not None:
            remote.push(list(refs))

    def _write_to_local_cache(self, pickled_content: bytes, path: str) -> None:
        """Mega-Cache populate: an entry pickled by torch becomes a store entry."""
        if disabled():
            return
        try:
            entry = pickle.loads(pickled_content)
            put_entry(self.writable, entry, path)
        except Exception as e:
            raise RuntimeError(f"Failed to save package to {path}: {e}") from e

    def read(self, path: str) -> tc.PrecompileCacheEntry:
        found = find_entry(self.store, path)
        if found is None:
            raise RuntimeError(f"No package found with key {path}")
        try:
            return fetch_entry(self.store, found[1])
        except Exception as e:
            raise RuntimeError(f"Failed to load package from key {path}: {e}") from e

    def save_cache_entry(self, cache_entry: tc.DynamoCacheEntry, key: str) -> None:
        """Save one entry with backends from PrecompileContext.

        A training graph whose backward never ran is completed first (see
        `context.complete_backends`). Unlike torch's, a backend
        PrecompileContext never recorded is reported (see `context.stitch`)
        rather than failing the save.
        """
        complete_backends([cache_entry])
        self.write(stitch(cache_entry)[0], key)

    def record_package(self, package: tc.CompilePackage) -> None:
        """Record a compiled package for the next save, under its wrapper
        lineage's key (`_torch.lineages`): a second wrapper of the same
        function keeps its own entry instead of replacing the first's, and
        one with an equal backend adds its variants to the first's
        (`_torch.lineage_entries`)."""
        key = tc.package_key(package)
        tc.PrecompileContext.record_dynamo_cache_entry(
            cache_entry=tc.shared_lineage_entries.entry(package, key), key=key
        )
        tc.single_flight.compiled(package)

    def _save_for_waiters(self, package: tc.CompilePackage, key: str, lock: Any) -> None:
        """Save the entry other processes wait for (`_torch.single_flight`),
        then release `lock` so they look it up. Nothing compiled (nothing
        recorded under `key`): only the release, and the waiters compile."""
        try:
            recorded = tc.recorded_entries().get(key)
            if recorded is not None:
                self.save_cache_entry(recorded, key)
                tc.counters["precompile"]["single_flight_saves"] += 1
        except Exception as e:  # the waiters then compile, as they would without the lock
            warnings.warn(PrecompileWarning(f"saving the entry other processes wait for failed: {e}"), stacklevel=2)
        finally:
            lock.release()

    def save(self, package: tc.CompilePackage) -> None:
        self.save_package(package, tc.package_key(package))

    def load(self, fn: Callable[..., Any]) -> tc.PrecompileCacheEntry | None:
        """The stored entry for `fn`, or None; never raises.

        A corrupt, missing or incompatible entry is a miss with a warning and
        `counters["dynamo_cache"]["dynamo_cache_error"]`, so torch compiles.
        """
        if disabled():
            tc.counters["precompile"]["disabled_loads"] += 1
            return None
        if tc.lookup_deferred():
            return None  # a method in a running class body: looked up on its first call
        with tc.deferred_full_gc():
            key = tc.loading_key(fn)
            try:
                return self._load(fn, key)
            except Exception as e:  # whatever the entry holds, the call compiles
                self._load_failed(key, e, fn)
                return None

    def _load(self, fn: Callable[..., Any], key: str) -> tc.PrecompileCacheEntry | None:
        try:
            found = find_entry(self.store, key)
        except Exception as e:  # an unreadable ref is an error, not a miss
            self._load_failed(key, e, fn)
            return None
        if found is None and tc.outside_wrapper():
            # torch files one package per function, so its by-hand
            # `DynamoCache.load_and_install_package(fn)` finds what a wrapper
            # of any backend saved: here, the one lineage stored for `fn`.
            lineages = find_lineage_entries(self.store, key)
            if len(lineages) > 1:
                self._lineage_unknown(fn, key, len(lineages))
                return None
            if lineages:
                ((key, found),) = lineages.items()
        if found is None:
            tc.counters["dynamo_cache"]["dynamo_cache_miss"] += 1
            tc.note_miss(key, fn)
            remote = getattr(self.store, "remote", None)
            refused = (
                None
                if remote is None
                else next(filter(None, map(remote.refusal, lookup_refs(key, start_devices=False))), None)
            )
            if refused is not None:
                explain.miss("untrusted", key, f"the remote's entry was refused: {refused}; compiling instead", fn=fn)
            else:
                explain.not_stored(self.store, key, fn=fn)
            return None
        name, digest = found
        try:
            entry = fetch_entry(self.store, digest)
        except Exception as e:
            self._load_failed(key, e, fn)
            return None
        # Loading its backends hashes torch's (and for a GPU entry Triton's)
        # installation: use the memoized hashes where the install matches.
        host_keys.prime(self.store, self.writable, gpu=entry.dynamo.device_type != "cpu")
        # Checked before torch sees it: an entry that does not restore here
        # is a miss with its reason, never an error in the user's call.
        restored = restore.prepare(fn, key, entry)
        if restored is None:
            return None
        entry = restored
        try:
            for backend in entry.backends.values():
                tc.PrecompileContext.record_artifact(backend)
        except Exception as e:
            self._load_failed(key, e, fn)
            return None
        tc.counters["dynamo_cache"]["dynamo_cache_hit"] += 1
        tc.served_entries.hand(entry)
        with contextlib.suppress(Exception):
            # Recency feeds size-capped eviction; a read-only store skips it.
            self.writable.touch_ref(name)
        return entry

    def _lineage_unknown(self, fn: Callable[..., Any], key: str, count: int) -> None:
        """A load outside every wrapper where `count` lineages of `fn` are
        stored: which wrapper's graphs to install is not the store's to guess."""
        tc.counters["dynamo_cache"]["dynamo_cache_miss"] += 1
        explain.miss(
            "key_mismatch",
            key,
            f"stored under {count} torch.compile wrappers of this function (backends, modes or options); "
            "a load outside a wrapper cannot tell which to install",
            fn=fn,
            factors=["lineage"],
        )

    def _load_failed(self, key: str, error: BaseException, fn: Callable[..., Any] | None = None) -> None:
        tc.counters["dynamo_cache"]["dynamo_cache_error"] += 1
        log.debug("precompile entry %s failed to load", key, exc_info=True)
        explain.miss(
            "load_error",
            key,
            f"entry {key[:16]} could not be loaded ({type(error).__name__}: {error}); compiling instead",
            fn=fn,
        )
        return None

    def load_and_install_package(self, fn: Callable[..., Any]) -> tc.CompilePackage | None:
        entry = self.load(fn)
        if entry is None:
            return None
        package = tc.CompilePackage(fn, entry.dynamo)
        package.install(entry.backends)
        return package


class _Installation:
    def __init__(self, cache: StoreDynamoCache, previous: Any, save_on_exit: bool) -> None:
        self.cache = cache
        self.previous = previous
        self.save_on_exit = save_on_exit
        # Puts `caching_precompile` back as install() found it (None: left alone).
        self.restore_flag: Callable[[], None] | None = None


_lock = threading.RLock()
_active: _Installation | None = None
_atexit_registered = False


def _save_for_torch() -> dict[str, Any]:
    # What torch.compiler.save_cache_artifacts() saves while installed (see
    # `_torch.save_to_dynamo_cache`): the store's way, and the entries also
    # travel in its Mega-Cache blob. The report rides along under its own key.
    report = _save(on_written=_record_for_mega_cache)
    return dataclasses.asdict(report)


def _install_failed(package: Any, error: BaseException) -> None:
    # Dynamo installs what `load` returned; when that fails (a guard that
    # cannot be rebuilt against this process's globals, say), the store's
    # load already counted it as loaded. Called before the install is undone,
    # while the package still names its function.
    tc.counters["precompile"]["install_failed"] += 1
    fn = tc.package_function(package)
    log.debug("installing a stored entry failed", exc_info=error)
    try:
        key = tc.package_key(package) if fn is not None else ""
    except Exception:
        key = ""
    explain.install_failed(key, f"{type(error).__name__}: {error}; compiling instead", fn=fn)


def _compiled_unstored(fn: Any, detail: str) -> None:
    explain.miss("unstorable", "", detail, fn=fn)


def _wait_timed_out(key: str, waited: float, fn: Any) -> None:
    explain.miss(
        "wait_timeout",
        key,
        f"another process held this function's compile lock for {waited:.0f} s; compiling here too",
        fn=fn,
    )


def install(
    path: str | os.PathLike[str] | None = None,
    *,
    layers: Sequence[Any] = (),
    remote: Any = None,
    enable: bool = True,
    save_on_exit: bool = True,
    trusted_keys: Sequence[str | os.PathLike[str]] | None = None,
    allow_unsigned: bool | None = None,
    signing_key: str | os.PathLike[str] | None = None,
    shared_store: bool = False,
    single_flight: bool | None = None,
) -> StoreDynamoCache:
    """Make torch's precompile cache use a precompile store.

    `path` defaults to `default_store_path()`. `layers` are read-only stores
    or bundles consulted after it. With `trusted_keys` (public keys
    `ed25519:<hex>` or files of them; default `$PRECOMPILE_TRUSTED_KEYS`),
    every bundle layer must be signed by one of them: anything else raises
    `UntrustedError` here, before a byte of it is read or unpickled. The
    store at `path` must be the user's own unless `shared_store` (a setgid
    directory shared with one of the user's groups). `remote` (a URL such as
    `redis://host:6379/0` or `redis+cluster://host:7000`, or a
    `precompile.remote.Remote`; default `$PRECOMPILE_REMOTE`) is read last,
    serving only entries whose ref a trusted key signed, and receives every
    save, signed with `signing_key` (a key file from `keygen`; default
    `$PRECOMPILE_SIGNING_KEY`; without one saves stay local); see
    `precompile.remote.layer` and `precompile.remote.trust`. With no trusted
    key, neither bundles nor remote entries are loaded unless
    `allow_unsigned` (default `$PRECOMPILE_ALLOW_UNSIGNED=1`). With `enable`, sets
    `torch._dynamo.config.caching_precompile`; with `save_on_exit`, what was
    compiled is saved when the interpreter exits. With `single_flight` (default
    `$PRECOMPILE_SINGLE_FLIGHT`: 1, 0, or unset for on only in a distributed
    job of more than one rank), a function no process has stored compiles in
    one process of those sharing the store, which saves it when its first
    call returns (in a job of several ranks: once Dynamo has compiled it); the
    others wait for its entry on their first call (at most
    `$PRECOMPILE_SINGLE_FLIGHT_TIMEOUT` seconds, default 900) and load it.
    Installing again replaces the previous installation. A torch older than 2.11 raises
    `UnsupportedTorchError`; one newer than the newest tested warns once.
    """
    global _active, _atexit_registered
    from .layers import open_layered

    tc.check_torch_version()
    from .remote import LiveCounters, open_remote

    patches_off = tc.patches_off()
    flight_mode = tc.single_flight_mode_from_env() if single_flight is None else single_flight
    flight_timeout = tc.single_flight_timeout_from_env()
    remote = open_remote(remote, counters=LiveCounters(lambda: tc.counters["precompile_remote"]))
    store = open_layered(
        os.fspath(path) if path is not None else default_store_path(),
        layers,
        remote,
        trusted_keys=trusted_keys,
        allow_unsigned=allow_unsigned,
        signing_key=signing_key,
        shared=shared_store,
    )
    cache = StoreDynamoCache(store)
    with _lock:
        if _active is not None:
            uninstall()
        previous = tc.swap_dynamo_cache(cache)
        _active = _Installation(cache, previous, save_on_exit)
        if enable:
            _active.restore_flag = tc.set_caching_precompile(True)
        tc.start_all(
            off=patches_off, save=_save_for_torch, on_install_failure=_install_failed, on_unnamed=explain.unstorable
        )
        root = getattr(cache.writable, "path", None)
        tc.single_flight.configure(
            None if root is None else os.fspath(root),
            mode=flight_mode,
            timeout=flight_timeout,
            stored=lambda key: find_entry(store, key) is not None,
            save=cache._save_for_waiters,
            on_timeout=_wait_timed_out,
        )
        tc.ddp_optimizer_frames.set_on_unstored(_compiled_unstored)
        explain.begin(getattr(cache.writable, "path", None))
        if not _atexit_registered:
            atexit.register(_save_at_exit)
            _atexit_registered = True
    return cache


def uninstall() -> None:
    """Give torch its own DynamoCache back."""
    global _active
    with _lock:
        if _active is None:
            return
        tc.swap_dynamo_cache(None)
        if _active.restore_flag is not None:
            _active.restore_flag()
        explain.end()
        tc.stop_all()
        _active = None


@contextlib.contextmanager
def installed(
    path: str | os.PathLike[str] | None = None,
    *,
    layers: Sequence[Any] = (),
    remote: Any = None,
    enable: bool = True,
    save_on_exit: bool = True,
    trusted_keys: Sequence[str | os.PathLike[str]] | None = None,
    allow_unsigned: bool | None = None,
    signing_key: str | os.PathLike[str] | None = None,
    shared_store: bool = False,
    single_flight: bool | None = None,
) -> Iterator[StoreDynamoCache]:
    """`install()` for the duration of a `with` block (the same arguments)."""
    cache = install(
        path,
        layers=layers,
        remote=remote,
        enable=enable,
        save_on_exit=save_on_exit,
        trusted_keys=trusted_keys,
        allow_unsigned=allow_unsigned,
        signing_key=signing_key,
        shared_store=shared_store,
        single_flight=single_flight,
    )
    try:
        yield cache
    finally:
        uninstall()


def save() -> SaveReport:
    """Store everything compiled so far in this process."""
    return _save()


def _save(
    on_written: Callable[[str, tc.PrecompileCacheEntry], None] | None = None, *, at_exit: bool = False
) -> SaveReport:
    with _lock:
        if _active is None:
            raise RuntimeError("precompile is not installed; call precompile.install() first")
        cache = _active.cache
    if disabled():
        return SaveReport(entries={}, backends=0, unique_backends=0, missing_backends=0)
    report = save_context(cache.writable, on_written, at_exit=at_exit)
    explain.counts.add("saves", len(report.entries))
    explain.counts.flush()
    cache.push(list(report.refs.values()))
    return report


def _save_at_exit() -> None:
    active = _active
    if active is None:
        return
    if active.save_on_exit and tc.recorded_entries():
        try:
            _save(at_exit=True)
        except Exception as e:  # at exit there is no caller to raise to
            warnings.warn(PrecompileWarning(f"saving precompile entries at exit failed: {e}"), stacklevel=1)
    # What this process counted goes into the store's stats (`precompile stats`).
    explain.counts.flush()
