"""What precompile needs of a store, as typed interfaces.

`Store` (a writable local store), `Bundle` (a read-only pack),
`ReadOnlyStore` (any layer with its writes refused) and `LayeredStore` (a
writable store over read-only layers) all satisfy `ReadStore`; `Store` and
`LayeredStore` also satisfy `WriteStore`. The torch integration is written
against these, not against a class.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = ["BatchRead", "ReadStore", "Signed", "WriteStore"]


@runtime_checkable
class ReadStore(Protocol):
    """Reads: verified blobs, manifests and refs."""

    @property
    def path(self) -> str | os.PathLike[str]:
        """Where the store lives: a directory, a bundle file or a remote's URL."""
        ...

    def contains(self, digest: str) -> bool: ...

    def get(self, digest: str) -> Any: ...

    def get_manifest(self, digest: str) -> tuple[Sequence[str], Mapping[str, Any]]: ...

    def get_ref(self, name: str) -> str | None: ...

    def refs(self, prefix: str = "") -> list[str]: ...


@runtime_checkable
class BatchRead(Protocol):
    """A store that reads (and verifies) many blobs in one parallel batch."""

    def get_many(self, digests: list[str]) -> list[Any]: ...


@runtime_checkable
class Signed(Protocol):
    """A store whose content is signed (a bundle): it is checked before it is read."""

    def check_trusted(self, trusted_keys: Sequence[str] | None = None) -> None: ...


@runtime_checkable
class WriteStore(ReadStore, Protocol):
    """Reads plus content-addressed writes and ref updates."""

    def put(self, data: Any) -> str: ...

    def put_file(self, path: str) -> str: ...

    def put_manifest(self, children: list[str], meta: dict[str, Any]) -> str: ...

    def set_ref(self, name: str, digest: str) -> None: ...

    def delete_ref(self, name: str) -> bool: ...

    # Whether the ref exists (and was touched); callers may ignore it.
    def touch_ref(self, name: str) -> bool: ...
