"""Moving entries between a local store and a remote: push, pull, stats, gc.

An entry is a ref naming a manifest whose children are blobs and further
manifests. Both directions walk that closure level by level, one pipelined
round trip per level, and move only what the other side lacks. A push
uploads every blob before it sets any ref, so a remote ref never names a
missing object; a pull writes a ref locally only once its whole closure is
in the local store.

Every ref a push sets is signed with the pushing host's key, and a pull sets
locally only refs whose signature a trusted key verifies (see `trust`).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from .._core import (
    CorruptObjectError,
    FormatError,
    MissingObjectError,
    SigningKey,
    Store,
    StoreError,
    UntrustedError,
)
from ..paths import shared_refs
from .client import Remote
from .connection import RemoteError
from .manifest import digests_in, manifest_children
from .trust import SIGNING_KEY_ENV, KeySpecs, RefValue, TrustPolicy, resolve_signing_key

__all__ = ["SyncReport", "local_closure", "pull", "push", "remote_gc", "remote_usage"]

Progress = Callable[[int, int], object]


@dataclasses.dataclass
class SyncReport:
    """What one push or pull moved: refs set, objects and bytes transferred;
    the refs it could not move, {name: why} (`failures`); for a pull, the
    refs refused for want of a trusted signature (`untrusted`)."""

    refs: int = 0
    objects: int = 0
    objects_present: int = 0
    bytes: int = 0
    failures: dict[str, str] = dataclasses.field(default_factory=dict)
    untrusted: list[str] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _local_is_manifest(store: Store, digest: str) -> bool:
    # The magic is enough to choose: get_manifest then checks the rest. The
    # store reads it (never blocking on a FIFO, never following a link).
    return store.is_manifest(digest)


def _local_children(store: Store, digest: str) -> list[str] | None:
    """A local object's children, or None when it is a blob.

    A blob that merely starts with the manifest magic (a user's bytes can)
    but does not parse as one is a blob: refusing it would fail every push.
    """
    if not _local_is_manifest(store, digest):
        return None
    try:
        return list(store.get_manifest(digest)[0])
    except FormatError:
        return None


def local_closure(store: Store, roots: Sequence[str]) -> dict[str, bool]:
    """Every object `roots` reach in the local store: {digest: is_manifest}."""
    seen: dict[str, bool] = {}
    stack = list(roots)
    while stack:
        d = stack.pop()
        if d in seen:
            continue
        children = _local_children(store, d)
        seen[d] = children is not None
        stack.extend(children or [])
    return seen


def push(
    store: Store,
    remote: Remote,
    names: Sequence[str] | None = None,
    progress: Progress | None = None,
    *,
    signing_key: str | os.PathLike[str] | SigningKey | None = None,
) -> SyncReport:
    """Upload refs `names` (default: all local refs but the host-local
    ones) and what they reach, each ref signed with `signing_key` (default
    `$PRECOMPILE_SIGNING_KEY`); without a key, raises `UntrustedError`
    before anything is sent."""
    key = resolve_signing_key(signing_key)
    if key is None:
        raise UntrustedError(f"no signing key: pass signing_key= or set ${SIGNING_KEY_ENV} to publish to a remote")
    names = list(shared_refs(store.refs()) if names is None else names)
    refs: dict[str, str] = {}
    for name in names:
        digest = store.get_ref(name)
        if digest is None:
            raise KeyError(name)
        refs[name] = digest
    closure = local_closure(store, list(refs.values()))
    present = remote.touch_and_check(list(closure))
    missing = [d for d in closure if d not in present]
    sizes = {d: _size(store, d) for d in missing}
    total = sum(sizes.values())
    report = SyncReport(objects_present=len(present))
    done = 0
    # Upload in slices so that progress moves and memory stays bounded.
    step = 64
    for start in range(0, len(missing), step):
        part = missing[start : start + step]
        sent = remote.put_blobs((d, store.get(d), closure[d]) for d in part)
        done += sent
        report.objects += len(part)
        report.bytes += sent
        if progress is not None:
            progress(done, total)
    remote.counters["blobs_written"] += report.objects
    remote.counters["bytes_written"] += report.bytes
    # Refs last: everything they reach is on the remote by now.
    remote.set_refs({n: RefValue.signed(key, n, d) for n, d in refs.items()})
    report.refs = len(refs)
    return report


def _size(store: Store, digest: str) -> int:
    return store.size(digest)


def pull_closure(store: Store, remote: Remote, root: str, report: SyncReport | None = None) -> SyncReport:
    """Bring everything `root` reaches into `store`, verified, one round trip per level."""
    report = SyncReport() if report is None else report
    seen: set[str] = set()
    frontier = [root]
    while frontier:
        frontier = [d for d in dict.fromkeys(frontier) if d not in seen]
        seen.update(frontier)
        missing = [d for d in frontier if not store.contains(d)]
        got = remote.get_objects(missing) if missing else {}
        report.objects_present += len(frontier) - len(missing)
        nxt: list[str] = []
        for d in frontier:
            if d in got:
                data, flagged = got[d]
                children = _remote_children(d, data, flagged)
                # Verified by get_objects; put hashes again and must agree.
                if store.put(data) != d:
                    raise CorruptObjectError(f"store and remote disagree on the digest of {d}")
                report.objects += 1
                report.bytes += len(data)
                nxt += children or []
            else:
                nxt += _local_children(store, d) or []
        frontier = nxt
    return report


def _remote_children(digest: str, data: bytes, flagged: bool) -> list[str] | None:
    """The children of an object a remote handed back, None for a blob.

    The bytes decide, not the flag (which no digest covers): a blob pushed
    with the magic but not a manifest's content is a blob; an object the
    pusher flagged as a manifest that does not parse is damaged.
    """
    try:
        return manifest_children(data)
    except ValueError as e:
        if flagged:
            raise CorruptObjectError(f"remote manifest {digest} does not parse: {e}") from None
        return None


def pull(
    store: Store,
    remote: Remote,
    names: Sequence[str] | None = None,
    progress: Progress | None = None,
    *,
    trusted_keys: KeySpecs | None = None,
    allow_unsigned: bool | None = None,
    policy: TrustPolicy | None = None,
) -> SyncReport:
    """Download refs `names` (default: all remote refs) and what they reach.

    A ref that cannot be pulled (missing, damaged) is recorded in the
    report's `failures` and the rest go on; a fault of the server itself
    (`RemoteError`) stops the pull. Only refs signed by one of
    `trusted_keys` (default `$PRECOMPILE_TRUSTED_KEYS`) are pulled; the
    others are skipped, listed in the report's `untrusted` and counted. With
    no trusted key and no `allow_unsigned` opt-in, raises `UntrustedError`
    before reading anything.
    """
    policy = TrustPolicy.resolve(trusted_keys, allow_unsigned) if policy is None else policy
    if policy.closed:
        raise UntrustedError(f"pull from {remote.url}: no trusted keys are configured; {policy.how_to_open()}")
    names = list(remote.refs() if names is None else names)
    values = remote.ref_values(names)
    report = SyncReport()
    for i, name in enumerate(names):
        value = values[name]
        try:
            if value is None:
                raise MissingObjectError(f"the remote has no ref {name!r} naming a digest")
            if policy.refusal(name, value) is not None:
                remote.counters["untrusted"] += 1
                report.untrusted.append(name)
            else:
                pull_closure(store, remote, value.digest, report)
                store.set_ref(name, value.digest)
                report.refs += 1
        except RemoteError:
            raise
        except StoreError as e:
            report.failures[name] = str(e)
        if progress is not None:
            progress(i + 1, len(names))
    return report


def _remote_closures(
    remote: Remote,
    roots: dict[str, str],
    index: dict[str, dict[str, int]],
    *,
    strict: bool,
) -> tuple[dict[str, set[str]], set[str], set[str]]:
    """Each ref's closure on the remote, reading only manifests; the unreadable and the damaged.

    An object with no index entry, or a manifest that cannot be read, might
    reach anything: with `strict` (gc) it raises, so nothing is swept on a
    guess; otherwise it is returned among the unreadable and its subtree is
    left out. A manifest that reads (its digest verifies) but does not
    parse is damaged: it counts as reaching every digest found in its bytes.
    """
    children: dict[str, list[str]] = {}
    unreadable: set[str] = set()
    damaged: set[str] = set()
    closures: dict[str, set[str]] = {}
    for name, root in roots.items():
        seen: set[str] = set()
        frontier = [root]
        while frontier:
            frontier = [d for d in dict.fromkeys(frontier) if d not in seen]
            seen.update(frontier)
            unknown = [d for d in frontier if "m" not in index.get(d, {})]
            if unknown and strict:
                raise MissingObjectError(f"remote object {unknown[0]} has no index entry; nothing was deleted")
            unreadable.update(unknown)
            manifests = [d for d in frontier if index.get(d, {}).get("m") and d not in children]
            for d, data in _read_manifests(remote, manifests, strict, unreadable).items():
                try:
                    children[d] = manifest_children(data) or []
                except ValueError:
                    # A junk manifest may reach anything it names: keep
                    # every digest its bytes contain, and report it.
                    damaged.add(d)
                    children[d] = digests_in(data)
            frontier = [c for d in frontier for c in children.get(d, [])]
        closures[name] = seen
    return closures, unreadable, damaged


def _read_manifests(remote: Remote, digests: list[str], strict: bool, unreadable: set[str]) -> dict[str, bytes]:
    """One round trip for all; when that fails and not `strict`, one per manifest."""
    try:
        return remote.get_blobs(digests)
    except StoreError:
        if strict:
            raise
    got = {}
    for d in digests:
        try:
            got[d] = remote.get_blobs([d])[d]
        except StoreError:
            unreadable.add(d)
    return got


def remote_usage(remote: Remote) -> dict[str, Any]:
    """Entries, blobs, stored bytes and dedup ratio of the remote.

    `logical_bytes` counts each ref's closure in full (what the entries
    would take without sharing); `reachable_bytes` counts each reachable
    object once; the dedup ratio is their quotient. `damaged` lists
    manifests that read but do not parse; `incomplete` and
    `incomplete_bytes` count objects whose upload never finished (a pusher
    died midway) and the bytes their keys hold, which `remote_gc` frees
    after the grace period.
    """
    index = remote.index()
    names = remote.refs()
    roots = {n: d for n, d in remote.ref_digests(names).items() if d is not None}
    closures, unreadable, damaged = _remote_closures(remote, roots, index, strict=False)
    size = {d: m["n"] for d, m in index.items() if "n" in m}
    incomplete = remote.stored_bytes({d: m.get("c", 0) for d, m in index.items() if "n" not in m})
    reachable = set().union(*closures.values()) if closures else set()
    logical = sum(size.get(d, 0) for c in closures.values() for d in c)
    reachable_bytes = sum(size.get(d, 0) for d in reachable)
    return {
        "entries": len(roots),
        "blobs": len(size),
        "bytes": sum(size.values()),
        "reachable_bytes": reachable_bytes,
        "logical_bytes": logical,
        "missing": sorted(d for d in reachable if d not in size or d in unreadable),
        "dedup_ratio": logical / reachable_bytes if reachable_bytes else 1.0,
        "damaged": sorted(damaged),
        "incomplete": len(incomplete),
        "incomplete_bytes": sum(incomplete.values()),
    }


def remote_gc(remote: Remote, *, grace_seconds: float = 3600.0, dry_run: bool = False) -> dict[str, Any]:
    """Delete remote objects no remote ref reaches and no push touched within the grace period.

    A push touches every object of an entry before checking what the remote
    holds, and each deletion re-checks that time atomically on the server,
    so an object a concurrent push relies on survives. Incomplete uploads
    go too, chunks and all. A damaged manifest (it reads but does not parse)
    keeps every digest written in its bytes and is listed under `damaged`.
    """
    index = remote.index()
    roots = {n: d for n, d in remote.ref_digests(remote.refs()).items() if d is not None}
    closures, _, damaged = _remote_closures(remote, roots, index, strict=True)
    reachable = set().union(*closures.values()) if closures else set()
    cutoff = int((time.time() - grace_seconds) * 1000)
    freed = freed_bytes = kept = 0
    doomed = {d: m for d, m in index.items() if d not in reachable and m.get("t", 0) < cutoff}
    held = remote.stored_bytes({d: m.get("c", 0) for d, m in doomed.items() if "n" not in m})
    for d, meta in index.items():
        if d not in doomed:
            kept += 1
            continue
        if dry_run or remote.delete_if_old(d, meta.get("c", 0), cutoff):
            freed += 1
            freed_bytes += meta["n"] if "n" in meta else held[d]
        else:
            kept += 1
    return {
        "objects_freed": freed,
        "bytes_freed": freed_bytes,
        "objects_kept": kept,
        "dry_run": dry_run,
        "damaged": sorted(damaged),
    }
