"""Whole-install hashes, memoized by the identities of the files they hash.

Before a loaded Triton kernel can run, torch hashes its own sources
(`torch_key`) and Triton hashes its compiler, backends and `libtriton` (`triton_key`):
tenths of a second each, on every process start, for a value that only
changes when the installation does. As ccache's direct mode does, the store
keeps each value under a fingerprint of the identities of every file the
hash reads (path, size, mtime, ctime, inode, device), and a process whose
installation fingerprints the same uses the kept value instead of hashing.

A changed installation never gets a stale value: reinstalling or editing a
file changes its inode, size, mtime or ctime (ctime cannot be set back by a
user), so the fingerprint differs and the hash is computed again. The
fingerprint also covers the interpreter, whose version names the files read.

Memos are refs `host/<name>/<fingerprint>` naming a blob that holds the
value (docs/FORMAT.md). They are written to the writable store only; a
read-only store is read. They describe this host, so `ls`, `push` and
`export` leave them out unless named.
"""

from __future__ import annotations

import logging
import os
import sys
import time

from . import _torch as tc
from ._core import blake3_hex
from .paths import HOST_LOCAL_PREFIX
from .protocols import ReadStore, WriteStore

__all__ = ["MEMO_PREFIX", "fingerprint", "prime", "record"]

log = logging.getLogger(__name__)

MEMO_PREFIX = HOST_LOCAL_PREFIX

# Names handled in this process: each hash is primed or computed once.
_done: set[str] = set()


# A file changed this recently may change again within the same timestamp
# tick, unseen: such an installation is hashed, not memoized (ccache's
# "too new" rule).
TOO_NEW_S = 2.0


def fingerprint(name: str, files: list[str]) -> str | None:
    """The identity of `files` as one digest, or None while any of them is
    too new to trust its timestamps. A file that cannot be stat-ed is part of
    it too (as missing), so it changes when the file appears."""
    parts = [name, sys.version, sys.executable]
    recent = (time.time() - TOO_NEW_S) * 1e9
    for path in files:
        try:
            st = os.stat(path)  # follows links: a linked file changing counts
        except OSError:
            parts.append(f"{path}\0-")
            continue
        if st.st_mtime_ns > recent or st.st_ctime_ns > recent:
            return None
        parts.append(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}\0{st.st_dev}")
    return blake3_hex("\n".join(parts).encode("utf-8", "surrogateescape"))


def memo_ref(name: str, digest: str) -> str:
    return f"{MEMO_PREFIX}{name}/{digest}"


def prime(store: ReadStore, writable: WriteStore | None, *, gpu: bool) -> None:
    """Use the memoized install hashes a load needs, or compute and memoize them.

    Never raises: a memo that cannot be read or written leaves torch and
    Triton to hash as they always do.
    """
    for spec in tc.install_hashes(gpu):
        if spec.name in _done:
            continue
        _done.add(spec.name)
        try:
            _prime_one(store, writable, spec)
        except Exception:
            log.debug("install hash %s: memo skipped", spec.name, exc_info=True)


def _prime_one(store: ReadStore, writable: WriteStore | None, spec: tc.InstallHash) -> None:
    digest_of_files = fingerprint(spec.name, spec.files())
    if digest_of_files is None:
        tc.counters["precompile"][f"{spec.name}_memo_miss"] += 1
        return  # torch or Triton hashes it, as without the store
    ref = memo_ref(spec.name, digest_of_files)
    digest = store.get_ref(ref)
    if digest is not None:
        value = bytes(store.get(digest)).decode("utf-8")
        if spec.valid(value):
            spec.prime(value)
            tc.counters["precompile"][f"{spec.name}_memo_hit"] += 1
            return
    # The load about to run computes it anyway; computing it here first
    # costs nothing extra and lets the next process skip it.
    value = spec.compute()
    tc.counters["precompile"][f"{spec.name}_memo_miss"] += 1
    if writable is not None:
        writable.set_ref(ref, writable.put(value.encode("utf-8")))


def record(writable: WriteStore, *, gpu: bool) -> None:
    """Memoize the install hashes this process has already computed (a
    compile computes them), so the next process on this host skips them."""
    for spec in tc.install_hashes(gpu):
        try:
            files_digest = fingerprint(spec.name, spec.files()) if spec.computed() else None
            if files_digest is None:
                continue
            ref = memo_ref(spec.name, files_digest)
            if writable.get_ref(ref) is None:
                writable.set_ref(ref, writable.put(spec.compute().encode("utf-8")))
        except Exception:
            log.debug("install hash %s: memo not recorded", spec.name, exc_info=True)
