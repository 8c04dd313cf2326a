"""Read-only layers refuse writes; a layered store writes to its writable store only."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.synthetic import make_entries

from precompile import Store, open_bundle
from precompile.layers import LayeredStore, ReadOnlyStore, open_layer, open_layered, writable_of
from precompile.protocols import ReadStore, WriteStore


@pytest.fixture
def bundle_path(tmp_path: Path) -> Path:
    store = Store(tmp_path / "built")
    make_entries(store, 2)
    path = tmp_path / "entries.bundle"
    store.export_bundle(None, path)
    return path


def test_every_kind_of_layer_opens_read_only(bundle_path: Path, tmp_path: Path) -> None:
    other = Store(tmp_path / "other")
    other.set_ref("dynamo/x", other.put(b"x"))
    for source in (str(bundle_path), bundle_path, open_bundle(bundle_path), str(tmp_path / "other"), other):
        layer = open_layer(source, allow_unsigned=True)
        assert isinstance(layer, ReadOnlyStore) and isinstance(layer, ReadStore)
        assert layer.refs()
        for write in (
            lambda: layer.put(b"data"),
            lambda: layer.put_file(str(bundle_path)),
            lambda: layer.put_manifest([], {}),
            lambda: layer.set_ref("dynamo/y", "0" * 64),
            lambda: layer.delete_ref("dynamo/x"),
            lambda: layer.touch_ref("dynamo/x"),
        ):
            with pytest.raises(TypeError, match="is read-only"):
                write()
        with pytest.raises(TypeError, match="is read-only"):
            writable_of(layer)
    assert other.get_ref("dynamo/x") is not None


def test_a_layered_store_writes_to_its_writable_store(bundle_path: Path, tmp_path: Path) -> None:
    layered = open_layered(str(tmp_path / "local"), [str(bundle_path)], allow_unsigned=True)
    assert isinstance(layered, LayeredStore) and isinstance(layered, WriteStore)
    assert writable_of(layered) is layered.writable
    digest = layered.put(b"compiled here")
    layered.set_ref("dynamo/here", digest)
    assert layered.touch_ref("dynamo/here")
    local = Store(tmp_path / "local")
    assert local.get_ref("dynamo/here") == digest
    assert layered.stats().objects == 1
    assert layered.gc(dry_run=True).objects_freed == 0
    assert layered.delete_ref("dynamo/here") and local.get_ref("dynamo/here") is None
    assert layered.remote is None
    with pytest.raises(TypeError, match="Bundle is read-only"):
        writable_of(open_bundle(bundle_path))
