"""Damaged objects are reported, never returned."""

from __future__ import annotations

import os

import pytest

from precompile import CorruptObjectError, MissingObjectError, Store


def damage(path: str, edit) -> None:  # type: ignore[no-untyped-def]
    """Rewrites an object file in place (objects are stored read-only)."""
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        edit(f)


def flip_byte(f) -> None:  # type: ignore[no-untyped-def]
    f.seek(1234)
    byte = f.read(1)
    f.seek(1234)
    f.write(bytes([byte[0] ^ 0x01]))


DATA = os.urandom(1 << 20)


def test_flipped_byte_is_corrupt(store: Store) -> None:
    digest = store.put(DATA)
    damage(store.object_path(digest), flip_byte)
    with pytest.raises(CorruptObjectError, match=digest):
        store.get(digest)


def test_truncated_is_corrupt(store: Store) -> None:
    digest = store.put(DATA)
    damage(store.object_path(digest), lambda f: f.truncate(len(DATA) // 2))
    with pytest.raises(CorruptObjectError):
        store.get(digest)
    damage(store.object_path(digest), lambda f: f.truncate(0))
    with pytest.raises(CorruptObjectError):
        store.get(digest)


def test_deleted_is_missing(store: Store) -> None:
    digest = store.put(DATA)
    os.unlink(store.object_path(digest))
    assert not store.contains(digest)
    with pytest.raises(MissingObjectError, match=digest):
        store.get(digest)


def test_verify_false_skips_the_check(store: Store) -> None:
    digest = store.put(DATA)
    damage(store.object_path(digest), flip_byte)
    trusting = Store(store.path, verify=False)
    blob = trusting.get(digest)
    assert len(blob) == len(DATA)
    assert bytes(blob) != DATA
    with pytest.raises(MissingObjectError):
        trusting.get("0" * 64)


def test_verify_reports_corrupt_and_missing(store: Store) -> None:
    a = store.put(DATA)
    b = store.put(b"b" * 5000)
    c = store.put(b"c")
    manifest = store.put_manifest([a, b], {"name": "entry"})
    store.set_ref("entry", manifest)
    store.set_ref("plain", c)
    clean = store.verify()
    assert clean.to_dict() == {
        "objects": 4,
        "bytes": clean.bytes,
        "corrupt": [],
        "missing": [],
        "unknown": [],
        "holders": {},
        "ok": True,
    }
    assert clean.bytes == len(DATA) + 5000 + 1 + len(bytes(store.get(manifest)))

    damage(store.object_path(a), flip_byte)
    os.unlink(store.object_path(b))
    os.unlink(store.object_path(c))
    report = store.verify()
    assert report.ok is False
    assert report.corrupt == [a]
    assert report.missing == sorted([b, c])
    assert report.objects == 2
    assert report.holders == {a: ["entry"], b: ["entry"], c: ["plain"]}


def test_repeated_put_does_not_repair_or_rewrite(store: Store) -> None:
    # First writer wins: a dedup hit costs a stat and writes nothing, so it
    # never replaces the stored file.
    digest = store.put(DATA)
    before = os.stat(store.object_path(digest))
    assert store.put_with_status(DATA) == (digest, False)
    after = os.stat(store.object_path(digest))
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)
