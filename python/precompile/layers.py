"""Reading through several stores and bundles as one.

A serving host can run from a shipped bundle while still writing what it
compiles itself to a local store. `LayeredStore` answers reads from the
writable store first, then from each read-only layer in order; writes go to
the writable store only. Each layer is held as a `ReadOnlyStore`, so that a
write can never reach one, whatever it is underneath.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from ._core import Bundle, MissingObjectError, SigningKey, Store
from .protocols import BatchRead, ReadStore, Signed, WriteStore
from .remote import Remote, RemoteLayer
from .remote.trust import TrustPolicy, resolve_signing_key
from .warning import PrecompileWarning

if TYPE_CHECKING:
    from ._core import GcReport, Stats

__all__ = ["Layer", "LayerSource", "LayeredStore", "ReadOnlyStore", "open_layer", "open_layered", "writable_of"]

# What a read-only layer is once open, and what `open_layer` opens one from:
# a store directory or bundle file by path, or an open store, bundle or remote layer.
Layer = Store | Bundle | RemoteLayer
LayerSource = str | os.PathLike[str] | Layer


class ReadOnlyStore:
    """A layer as a store that only reads: every write raises `TypeError`.

    Reads go to the layer as they are; `get_many` reads in one batch where
    the layer can (a `Store`), one blob at a time where it cannot (a `Bundle`).
    """

    def __init__(self, layer: ReadStore) -> None:
        self.layer = layer

    def __repr__(self) -> str:
        return f"ReadOnlyStore({self.layer!r})"

    @property
    def path(self) -> str | os.PathLike[str]:
        return self.layer.path

    def contains(self, digest: str) -> bool:
        return self.layer.contains(digest)

    def get(self, digest: str) -> Any:
        return self.layer.get(digest)

    def get_many(self, digests: list[str]) -> list[Any]:
        if isinstance(self.layer, BatchRead):
            return self.layer.get_many(digests)
        return [self.layer.get(d) for d in digests]

    def get_manifest(self, digest: str) -> tuple[Sequence[str], Any]:
        return self.layer.get_manifest(digest)

    def get_ref(self, name: str) -> str | None:
        return self.layer.get_ref(name)

    def refs(self, prefix: str = "") -> list[str]:
        return self.layer.refs(prefix)

    # -- writes, all refused -------------------------------------------------
    def _refuse(self) -> NoReturn:
        raise TypeError(f"{type(self.layer).__name__} is read-only")

    def put(self, data: Any) -> str:
        self._refuse()

    def put_file(self, path: str) -> str:
        self._refuse()

    def put_manifest(self, children: list[str], meta: dict[str, Any]) -> str:
        self._refuse()

    def set_ref(self, name: str, digest: str) -> None:
        self._refuse()

    def delete_ref(self, name: str) -> bool:
        self._refuse()

    def touch_ref(self, name: str) -> bool:
        self._refuse()


def open_layer(
    layer: LayerSource,
    trusted_keys: Sequence[str | os.PathLike[str]] | None = None,
    *,
    allow_unsigned: bool | None = None,
    policy: TrustPolicy | None = None,
) -> ReadOnlyStore:
    """A read-only layer from a path (store dir or bundle file) or an open object.

    A bundle must be signed by one of `trusted_keys` (default:
    `$PRECOMPILE_TRUSTED_KEYS`), checked here, before anything of it is
    read, and its blobs are then hashed before they are served. With no
    trusted key, a bundle raises `UntrustedError` unless `allow_unsigned`
    (default `$PRECOMPILE_ALLOW_UNSIGNED=1`). A store directory must be the
    user's own (see `Store`).
    """
    if policy is None:
        policy = TrustPolicy.resolve(trusted_keys, allow_unsigned)
    if not isinstance(layer, (str, os.PathLike)):
        if isinstance(layer, Signed):
            keys = policy.bundle_keys(str(getattr(layer, "path", layer)))
            if keys is not None:
                layer.check_trusted(keys)
        return ReadOnlyStore(layer)
    path = os.fspath(layer)
    if os.path.isdir(path):
        return ReadOnlyStore(Store(path, create=False))
    from .bundle import open_bundle

    keys = policy.bundle_keys(path)
    if keys is None:
        return ReadOnlyStore(open_bundle(path))
    return ReadOnlyStore(open_bundle(path, trusted_keys=keys))


class LayeredStore:
    """The store API over a writable store and read-only layers.

    Reads try the writable store, then each layer in order; writes, ref
    updates, gc and stats act on the writable store.
    """

    def __init__(self, writable: Store, layers: Sequence[ReadStore], remote: RemoteLayer | None = None) -> None:
        self.writable = writable
        self.layers = tuple(layers)
        # The `RemoteLayer` among the layers, which saves also push to.
        self.remote = remote
        self._all: tuple[ReadStore, ...] = (writable, *self.layers)

    @property
    def path(self) -> str:
        return str(self.writable.path)

    # -- reads, through every layer -------------------------------------------
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

    def get_manifest(self, digest: str) -> tuple[Sequence[str], Any]:
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

    # -- writes and upkeep, on the writable store -----------------------------
    def put(self, data: Any) -> str:
        return self.writable.put(data)

    def put_file(self, path: str) -> str:
        return self.writable.put_file(path)

    def put_manifest(self, children: list[str], meta: dict[str, Any] | None = None) -> str:
        return self.writable.put_manifest(children, meta)

    def set_ref(self, name: str, digest: str) -> None:
        self.writable.set_ref(name, digest)

    def delete_ref(self, name: str) -> bool:
        return self.writable.delete_ref(name)

    def touch_ref(self, name: str) -> bool:
        return self.writable.touch_ref(name)

    def gc(self, dry_run: bool = False, grace_seconds: float = 3600.0) -> GcReport:
        return self.writable.gc(dry_run=dry_run, grace_seconds=grace_seconds)

    def stats(self) -> Stats:
        return self.writable.stats()


def open_layered(
    path: str,
    layers: Sequence[LayerSource] = (),
    remote: Remote | None = None,
    *,
    trusted_keys: Sequence[str | os.PathLike[str]] | None = None,
    allow_unsigned: bool | None = None,
    signing_key: str | os.PathLike[str] | SigningKey | None = None,
    shared: bool = False,
) -> Store | LayeredStore:
    """The store at `path`, layered over `layers` and then `remote`, if any.

    Every layer is opened (and a bundle's signature checked) before the
    writable store is, so a refused layer leaves nothing behind. The remote
    serves only refs signed by a trusted key (see `precompile.remote.trust`);
    saves are pushed to it only with a `signing_key` (default
    `$PRECOMPILE_SIGNING_KEY`).
    """
    policy = TrustPolicy.resolve(trusted_keys, allow_unsigned)
    opened = [open_layer(layer, policy=policy) for layer in layers]
    key = resolve_signing_key(signing_key) if remote is not None else None
    store = Store(path, shared=shared)
    if not opened and remote is None:
        return store
    remote_layer = None
    if remote is not None:
        if policy.closed:
            warnings.warn(
                PrecompileWarning(
                    f"precompile: no trusted keys are configured, so nothing is loaded from the remote "
                    f"{remote.url}; {policy.how_to_open()}"
                ),
                stacklevel=3,
            )
        remote_layer = RemoteLayer(remote, store, trust=policy, signing_key=key)
        opened.append(ReadOnlyStore(remote_layer))
    return LayeredStore(store, opened, remote_layer)


def writable_of(store: ReadStore) -> WriteStore:
    """Where writes to `store` go: the writable store under a layered one."""
    if isinstance(store, LayeredStore):
        return store.writable
    # A read-only layer has write methods only to refuse them.
    if isinstance(store, WriteStore) and not isinstance(store, ReadOnlyStore):
        return store
    raise TypeError(f"{type(store).__name__} is read-only")
