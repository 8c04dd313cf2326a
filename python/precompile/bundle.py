"""Bundles: one file that carries a set of entries to a serving host.

A bundle holds refs and every blob they reach, indexed by digest and aligned
so that blobs can be served straight from a read-only mapping. Build one with
`Store.export_bundle` (or `precompile export`), ship the file, and either
unpack it with `Store.import_bundle` or serve from it in place:

    bundle = precompile.open_bundle("model.bundle")
    precompile.install(layers=[bundle])        # or layers=["model.bundle"]

Trust
-----

A bundle is code: loading an entry unpickles it and maps its kernels. Sign it
on the build host (`Store.export_bundle(..., sign_with=KEYFILE)` or
`precompile export --sign KEYFILE`, with a key from `precompile.keygen`) and
serve it with `trusted_keys=[public_key]` (or `$PRECOMPILE_TRUSTED_KEYS`): a
bundle that is unsigned, signed by another key, or changed after signing then
raises `UntrustedError` when it is opened, before anything of it is used.

Serving from many threads and processes
---------------------------------------

`Store`, `Bundle` and `Blob` are immutable handles that may be shared by any
number of threads. Hashing, file I/O, fsync and lock waits run with the GIL
released, so threads that load entries at once proceed in parallel. Processes
that map the same bundle share its pages in the page cache: each process's
RSS counts them, but PSS (what `smaps_rollup` reports) splits them between
the processes, and that is what the machine actually spends.

After `fork()`
--------------

Everything is safe to use in the child of a `fork()`:

- Mappings are inherited. A `Bundle`, and any `Blob` or `memoryview` taken
  before the fork, keep working in the child and share the same physical
  pages with the parent (the mapping is read-only, so nothing is ever copied
  on write).
- A `Store` keeps no file open between calls: every call opens what it needs,
  so the child's calls use descriptors of its own.
- Parallel hashing and verification run on a thread pool that belongs to one
  process. A forked child, which inherits no threads, starts a fresh pool on
  first use instead of queueing work on threads that do not exist.
- The store's lock is an `flock` on `locks/gc.lock`, and an flock belongs to
  an *open file description*, not to a process. The child does not get a lock
  of its own, and the calls it makes take their own locks on descriptors they
  open, so parent and child exclude each other exactly as unrelated processes
  do. A lock is held only inside a call; so fork while no other thread is in
  the middle of a store write (as pre-fork servers do: load, then fork). If
  another thread is writing at that moment, the child's copy of that write's
  descriptor keeps the lock held until the child exits or execs (descriptors
  are close-on-exec), which only delays a GC; writers are not blocked.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ._core import Bundle, CorruptObjectError, open_bundle

__all__ = ["Bundle", "load_all", "open_bundle"]


def load_all(bundle: Bundle, refs: Iterable[str] | None = None, *, prefetch: bool = True) -> dict[str, list[str]]:
    """Gets the entries named `refs` (default: all) ready to serve.

    Walks each ref through its manifests, asks the kernel to read ahead every
    blob they need (`madvise(MADV_WILLNEED)`, when `prefetch`), and checks all
    of them against their digests in parallel, with the GIL released. Later
    `bundle.get` calls for these blobs are then served without hashing again.

    Returns, for each ref, the digests it reaches (the entry itself first).
    Raises `CorruptObjectError` naming every blob that fails the check, and
    `KeyError` for a ref the bundle does not hold.
    """
    names: Sequence[str] = bundle.refs() if refs is None else list(refs)
    closures: dict[str, list[str]] = {}
    for name in names:
        digest = bundle.get_ref(name)
        if digest is None:
            raise KeyError(name)
        closures[name] = bundle.closure(digest)
    needed = list(dict.fromkeys(d for closure in closures.values() for d in closure))
    if prefetch:
        bundle.prefetch(needed)
    corrupt = bundle.verify_blobs(needed)
    if corrupt:
        raise CorruptObjectError(f"{len(corrupt)} blob(s) of {bundle.path} are corrupt: {', '.join(corrupt)}")
    return closures
