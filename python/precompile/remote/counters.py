"""The figures a `Remote` keeps, and a mapping that keeps them in torch's `counters`."""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping

__all__ = ["COUNTERS", "LiveCounters"]

# What `Remote.stats()` reports. hits / misses: entries a read found and
# brought over, or did not; ref_hits / ref_misses: ref lookups; errors:
# faults of the server or network; corrupt: values that did not hash to
# their name (or lost a chunk); missing_objects: objects a ref reached that
# the remote lacks; untrusted: refs refused for a missing or bad signature
# (or because no key is trusted); blobs/bytes read and written; refs written.
COUNTERS = (
    "hits",
    "misses",
    "ref_hits",
    "ref_misses",
    "errors",
    "corrupt",
    "untrusted",
    "missing_objects",
    "blobs_read",
    "bytes_read",
    "blobs_written",
    "bytes_written",
    "refs_written",
)


class LiveCounters(MutableMapping[str, int]):
    """Counters kept in a mapping looked up afresh on every use.

    torch's `counters` is a defaultdict that its own code may clear; looking
    `counters["precompile_remote"]` up each time keeps the figures where
    torch's tools read them.
    """

    def __init__(self, lookup: Callable[[], MutableMapping[str, int]]) -> None:
        self._lookup = lookup

    def __getitem__(self, name: str) -> int:
        return self._lookup().get(name, 0)

    def __setitem__(self, name: str, value: int) -> None:
        self._lookup()[name] = value

    def __delitem__(self, name: str) -> None:
        del self._lookup()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._lookup()))

    def __len__(self) -> int:
        return len(self._lookup())
