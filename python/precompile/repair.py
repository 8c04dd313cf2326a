"""Repairing what `Store.verify` found: fetch each damaged object again, or drop what needs it.

A damaged object (corrupt: its bytes do not hash to its name, or not a regular
file; or missing: a ref reaches it and it is absent) is fetched again from the
first source that holds it: read-only layers (store directories, bundle files,
open stores, bundles or remote layers) in the order given, then a remote. What a
source returns is checked against the digest before it is stored, and storing it
replaces the damaged file. A fetched manifest may reach further damage, so the
store is verified again until nothing more can be fetched.

Damage that no source holds makes every ref that reaches it drop, and only those:
a ref that would load broken code is worse than a miss. Damage no ref reaches is
garbage, left for `gc` to free; it does not count against the store.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

from ._core import Store, StoreError, VerifyReport, blake3_hex
from .layers import LayerSource, open_layer
from .protocols import ReadStore
from .remote import Remote, RemoteError, open_remote

__all__ = ["RepairReport", "repair"]

# Each round fetches what the last verify found; a fetched manifest can only
# reveal objects deeper down, so the rounds end. The bound is a guard.
_MAX_ROUNDS = 64


@dataclasses.dataclass
class RepairReport:
    """What `repair` did.

    `refetched`: digests stored again from a source, verified by digest.
    `dropped`: ref name -> the damaged digests it reached, for each ref deleted.
    `garbage`: damaged objects no ref reaches (`gc` frees them).
    `unknown`: manifests of a version this build cannot read; left as they are.
    `ok`: no ref reaches damage any more and no ref had to be dropped.
    """

    refetched: list[str] = dataclasses.field(default_factory=list)
    dropped: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    garbage: list[str] = dataclasses.field(default_factory=list)
    unknown: list[str] = dataclasses.field(default_factory=list)
    ok: bool = True

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def summary(self) -> str:
        """One line: what was fetched, what was dropped, what is left."""
        parts = [f"{len(self.refetched)} objects fetched again"]
        if self.dropped:
            parts.append(f"{len(self.dropped)} refs dropped (no source holds what they reach)")
        if self.unknown:
            parts.append(f"{len(self.unknown)} manifests of an unknown version left as they are")
        if self.garbage:
            parts.append(f"{len(self.garbage)} damaged objects no ref reaches left for gc")
        return ("repaired: " if self.ok else "damage remains: ") + ", ".join(parts)


def _fetch(digest: str, sources: Sequence[ReadStore], remote: Remote | None) -> Any:
    """The bytes of `digest` from the first source that holds them intact, else None."""
    for source in sources:
        try:
            data = source.get(digest)
        except (StoreError, OSError, KeyError):
            continue
        if blake3_hex(data) == digest:
            return data
    if remote is not None:
        try:
            data = remote.get_blobs([digest])[digest]
        except (StoreError, RemoteError):
            return None
        if blake3_hex(data) == digest:
            return data
    return None


def repair(
    store: Store,
    layers: Sequence[LayerSource] = (),
    remote: Remote | str | None = None,
    trusted_keys: Sequence[str | os.PathLike[str]] | None = None,
) -> RepairReport:
    """Repairs `store` from `layers` and `remote` (a `Remote` or URL); see the module doc.

    Bundles among `layers` must be signed by one of `trusted_keys` (see
    `open_layer`). Sources that fail to open raise before anything changes.
    """
    sources = [open_layer(layer, trusted_keys) for layer in layers]
    remote_ = open_remote(remote) if remote is not None else None
    report = RepairReport()
    unrecoverable: set[str] = set()
    verified: VerifyReport = store.verify()
    for _ in range(_MAX_ROUNDS):
        damaged = [d for d in [*verified.corrupt, *verified.missing] if d not in unrecoverable]
        fetched = False
        for digest in damaged:
            data = _fetch(digest, sources, remote_)
            if data is None:
                unrecoverable.add(digest)
                continue
            store.put(data)
            report.refetched.append(digest)
            fetched = True
        if not fetched:
            break
        verified = store.verify()

    for digest in sorted(unrecoverable):
        names = verified.holders.get(digest, [])
        if not names:
            report.garbage.append(digest)
        for name in names:
            report.dropped.setdefault(name, []).append(digest)
    for name in sorted(report.dropped):
        store.delete_ref(name)
    report.unknown = list(verified.unknown)
    report.ok = not report.dropped and not report.unknown
    return report
