"""Reading through several stores and bundles as one.

A serving host can run from a shipped bundle while still writing what it
compiles itself to a local store. `LayeredStore` answers reads from the
writable store first, then from each read-only layer in order; writes go to
the writable store only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ._core import MissingObjectError, Store
from .protocols import BatchRead, ReadStore, WriteStore

__all__ = ["LayeredStore", "open_layer", "open_layered", "writable_of"]


def open_layer(layer: Any, trusted_keys: Sequence[Any] | None = None) -> Any:
    """A read-only layer from a path (store dir or bundle file) or an open object.

    A bundle must be signed by one of `trusted_keys` (default:
    `$PRECOMPILE_TRUSTED_KEYS`; when neither names a key, none is required),
    checked here, before anything of it is read. A store directory must be
    the user's own (see `Store`).
    """
    if not isinstance(layer, (str, os.PathLike)):
        check = getattr(layer, "check_trusted", None)
        if check is not None:
            check(trusted_keys)
        return layer
    path = os.fspath(layer)
    if os.path.isdir(path):
        return Store(path, create=False)
    from .bundle import open_bundle

    return open_bundle(path, trusted_keys=trusted_keys)


class LayeredStore:
    """The store API over a writable store and read-only layers."""

    # The `RemoteLayer` among the layers, which saves also push to.
    remote: Any = None

    def __init__(self, writable: Store, layers: Sequence[ReadStore]) -> None:
        self.writable = writable
        self.layers = tuple(layers)
        self._all = (writable, *self.layers)

    @property
    def path(self) -> str:
        return str(self.writable.path)

    def contains(self, digest: str) -> bool:
        return any(layer.contains(digest) for layer in self._all)

    def get(self, digest: str) -> Any:
        for layer in self._all:
            if layer.contains(digest):
                return layer.get(digest)
        raise MissingObjectError(f"object {digest} is in no layer")

    def get_many(self, digests: list[str]) -> list[Any]:
        # One batch per layer, in the order asked for.
        out: list[Any] = [None] * len(digests)
        pending = list(range(len(digests)))
        for layer in self._all:
            here = [i for i in pending if layer.contains(digests[i])]
            if here:
                wanted = [digests[i] for i in here]
                if isinstance(layer, BatchRead):
                    got = layer.get_many(wanted)
                else:
                    got = [layer.get(d) for d in wanted]
                for i, blob in zip(here, got):
                    out[i] = blob
                pending = [i for i in pending if out[i] is None]
        if pending:
            raise MissingObjectError(f"object {digests[pending[0]]} is in no layer")
        return out

    def get_manifest(self, digest: str) -> Any:
        for layer in self._all:
            if layer.contains(digest):
                return layer.get_manifest(digest)
        raise MissingObjectError(f"manifest {digest} is in no layer")

    def get_ref(self, name: str) -> str | None:
        for layer in self._all:
            digest = layer.get_ref(name)
            if digest is not None:
                return digest
        return None

    def refs(self, prefix: str = "") -> list[str]:
        names: set[str] = set()
        for layer in self._all:
            names.update(layer.refs(prefix))
        return sorted(names)

    def __getattr__(self, name: str) -> Any:
        # Writes, refs updates, gc and stats act on the writable store.
        return getattr(self.writable, name)


def open_layered(
    path: str,
    layers: Sequence[Any] = (),
    remote: Any = None,
    *,
    trusted_keys: Sequence[Any] | None = None,
    shared: bool = False,
) -> Store | LayeredStore:
    """The store at `path`, layered over `layers` and then `remote` (a
    `Remote`), if any.

    Every layer is opened (and a bundle's signature checked) before the
    writable store is, so a refused layer leaves nothing behind.
    """
    opened = [open_layer(layer, trusted_keys) for layer in layers]
    store = Store(path, shared=shared)
    if not opened and remote is None:
        return store
    if remote is not None:
        from .remote import RemoteLayer

        opened.append(RemoteLayer(remote, store))
    layered = LayeredStore(store, opened)
    if remote is not None:
        layered.remote = opened[-1]
    return layered


def writable_of(store: ReadStore) -> WriteStore:
    """Where writes to `store` go: the writable store under a layered one."""
    if isinstance(store, LayeredStore):
        return store.writable
    if isinstance(store, WriteStore):
        return store
    raise TypeError(f"{type(store).__name__} is read-only")
