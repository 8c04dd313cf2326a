"""Damage inside the store: GC fails closed, puts and imports repair, verify
reports what get refuses, and refs never name an incomplete closure."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from precompile import (
    CorruptObjectError,
    FormatError,
    MissingObjectError,
    Store,
    blake3_hex,
)

MAGIC = b"precompile-manifest\n"


def replace_object(store: Store, digest: str, content: bytes | None) -> Path:
    """Puts `content` (or, with None, nothing) at an object's path: objects
    are read-only, so tests replace the file rather than edit it."""
    path = Path(store.object_path(digest))
    if path.is_symlink() or path.exists():
        path.unlink()
    if content is not None:
        path.write_bytes(content)
    return path


def flip_first_byte(store: Store, digest: str) -> None:
    data = bytearray(bytes(Path(store.object_path(digest)).read_bytes()))
    data[0] ^= 0xFF
    replace_object(store, digest, bytes(data))


def entry(store: Store) -> tuple[str, list[str]]:
    leaves = [store.put(f"leaf {i} ".encode() * 50) for i in range(3)]
    return store.put_manifest(leaves, {"kind": "entry"}), leaves


def test_gc_stops_at_a_damaged_reachable_manifest(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    manifest, leaves = entry(store)
    store.set_ref("r", manifest)
    flip_first_byte(store, manifest)  # no longer even looks like a manifest
    with pytest.raises(CorruptObjectError):
        store.gc(False, 0.0)
    for leaf in leaves:
        assert store.get(leaf)
    assert manifest in store.verify().corrupt


def test_gc_stops_at_a_manifest_of_unknown_version(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    child = store.put(b"child of a future manifest")
    doc = {"version": 2, "children": [child], "meta": {}}
    future = MAGIC + json.dumps(doc).encode()
    digest = blake3_hex(future)
    replace_object(store, digest, future)
    store.set_ref("future", digest)
    with pytest.raises(FormatError, match="version 2"):
        store.gc(False, 0.0)
    assert bytes(store.get(child)) == b"child of a future manifest"
    report = store.verify()
    assert report.unknown == [digest] and not report.ok


def test_user_data_that_starts_with_the_magic_is_a_leaf(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    digest = store.put(MAGIC + b"not json at all")
    store.set_ref("data", digest)
    store.gc(False, 0.0)
    assert store.verify().ok


@pytest.mark.parametrize("how", ["corrupt", "truncated", "missing", "dangling-link", "directory"])
def test_put_repairs_a_damaged_object(tmp_path: Path, how: str) -> None:
    store = Store(tmp_path / "s")
    data = b"precious content " * 100
    digest = store.put(data)
    path = Path(store.object_path(digest))
    if how == "corrupt":
        replace_object(store, digest, b"X" + data[1:])
    elif how == "truncated":
        replace_object(store, digest, data[:-1])
    elif how == "missing":
        replace_object(store, digest, None)
    elif how == "dangling-link":
        replace_object(store, digest, None)
        path.symlink_to(tmp_path / "nowhere")
    else:
        replace_object(store, digest, None)
        path.mkdir()
        (path / "inside").write_bytes(b"x")
    assert store.put_with_status(data) == (digest, True)
    assert path.is_file() and not path.is_symlink()
    assert bytes(store.get(digest)) == data
    assert store.put_with_status(data) == (digest, False)
    assert store.verify().ok


def test_put_file_repairs_too(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    src = tmp_path / "src.bin"
    src.write_bytes(b"file content " * 1000)
    digest = store.put_file(src)
    flip_first_byte(store, digest)
    assert store.put_file(src) == digest
    assert bytes(store.get(digest)) == src.read_bytes()


def test_import_repairs_damaged_objects(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    manifest, leaves = entry(store)
    store.set_ref("r", manifest)
    bundle = tmp_path / "r.bundle"
    store.export_bundle(["r"], bundle)
    flip_first_byte(store, leaves[1])
    replace_object(store, leaves[2], None)
    report = store.import_bundle(bundle, allow_unsigned=True)
    assert report.objects_repaired == 1 and report.objects_new == 1
    assert store.verify().ok
    assert [bytes(b) for b in store.get_many(leaves)][1] == b"leaf 1 " * 50


def test_dedup_rehashes_an_object_damaged_in_place(tmp_path: Path) -> None:
    """Same size, same inode, new bytes (an editor, bit rot via cp): the
    dedup check sees the change and repairs it."""
    store = Store(tmp_path / "s")
    data = os.urandom(100_000)
    digest = store.put(data)
    path = Path(store.object_path(digest))
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.write(b"\0" * 10)
    assert store.put_with_status(data) == (digest, True)
    assert bytes(store.get(digest)) == data


def test_verify_reports_links_and_directories_as_corrupt(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    linked = store.put(b"linked content")
    store.set_ref("l", linked)
    copy = tmp_path / "copy"
    copy.write_bytes(b"linked content")
    replace_object(store, linked, None)
    Path(store.object_path(linked)).symlink_to(copy)
    directory = store.put(b"directory content")
    replace_object(store, directory, None)
    Path(store.object_path(directory)).mkdir()
    report = store.verify()
    assert sorted(report.corrupt) == sorted([linked, directory]) and not report.ok
    with pytest.raises(CorruptObjectError):
        store.get(linked)
    with pytest.raises(CorruptObjectError):
        store.get(directory)


def test_refs_never_name_a_manifest_with_missing_children(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    manifest, leaves = entry(store)
    top = store.put_manifest([manifest], {"kind": "top"})
    replace_object(store, leaves[0], None)  # as a GC killed part-way could leave it
    with pytest.raises(MissingObjectError, match=leaves[0]):
        store.set_ref("r", manifest)
    with pytest.raises(MissingObjectError, match=leaves[0]):
        store.set_ref("r", top)
    with pytest.raises(MissingObjectError, match=leaves[0]):
        store.put_manifest([manifest], {"kind": "another top"})
    assert store.refs() == []
    store.put(b"leaf 0 " * 50)
    store.set_ref("r", top)
