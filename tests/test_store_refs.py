"""Refs and manifests."""

from __future__ import annotations

import time

import pytest

from precompile import FormatError, MissingObjectError, Store


def test_refs_roundtrip(store: Store) -> None:
    a = store.put(b"a")
    b = store.put(b"b")
    assert store.get_ref("x") is None
    store.set_ref("x", a)
    assert store.get_ref("x") == a
    store.set_ref("x", b)
    assert store.get_ref("x") == b
    store.set_ref("dynamo/abc", a)
    store.set_ref("dynamo/def/ghi", b)
    store.set_ref("inductor/k", a)
    assert store.refs() == ["dynamo/abc", "dynamo/def/ghi", "inductor/k", "x"]
    assert store.refs("dynamo/") == ["dynamo/abc", "dynamo/def/ghi"]
    assert store.refs(prefix="nothing") == []
    assert (store.path / "refs" / "dynamo" / "abc").read_text() == a + "\n"
    assert store.delete_ref("dynamo/abc") is True
    assert store.delete_ref("dynamo/abc") is False
    assert store.get_ref("dynamo/abc") is None
    assert store.stats().refs == 3
    assert list((store.path / "tmp").iterdir()) == []


def test_set_ref_needs_the_object(store: Store) -> None:
    with pytest.raises(MissingObjectError):
        store.set_ref("x", "ab" * 32)
    assert store.get_ref("x") is None


@pytest.mark.parametrize(
    "name",
    [
        "",
        "/etc/passwd",
        "../escape",
        "a/../../b",
        "a/..",
        "..",
        ".",
        "a//b",
        "a/",
        ".hidden",
        "a/.git",
        "nul\0byte",
        "back\\slash",
        "x" * 256,
    ],
)
def test_invalid_names_raise_value_error(store: Store, name: str) -> None:
    digest = store.put(b"a")
    for call in (
        lambda: store.set_ref(name, digest),
        lambda: store.get_ref(name),
        lambda: store.delete_ref(name),
        lambda: store.touch_ref(name),
        lambda: store.ref_mtime(name),
    ):
        with pytest.raises(ValueError, match="invalid ref name"):
            call()


def test_long_and_dotted_names_are_fine(store: Store) -> None:
    digest = store.put(b"a")
    for name in ["x" * 255, "v1.2.3", "a/b.c/d-e_f"]:
        store.set_ref(name, digest)
        assert store.get_ref(name) == digest


def test_ref_and_namespace_cannot_collide(store: Store) -> None:
    digest = store.put(b"a")
    store.set_ref("a", digest)
    with pytest.raises(ValueError):
        store.set_ref("a/b", digest)
    store.set_ref("ns/b", digest)
    with pytest.raises(ValueError):
        store.set_ref("ns", digest)


def test_touch_ref_and_mtime(store: Store) -> None:
    digest = store.put(b"a")
    assert store.ref_mtime("r") is None
    assert store.touch_ref("r") is False
    store.set_ref("r", digest)
    first = store.ref_mtime("r")
    assert first is not None and abs(first - time.time()) < 60
    time.sleep(0.02)
    assert store.touch_ref("r") is True
    second = store.ref_mtime("r")
    assert second is not None and second > first


def test_invalid_digests_raise_value_error(store: Store) -> None:
    for bad in ["", "abc", "AB" * 32, "zz" * 32, "a" * 65]:
        with pytest.raises(ValueError, match="invalid digest"):
            store.get(bad)
        with pytest.raises(ValueError):
            store.contains(bad)
        with pytest.raises(ValueError):
            store.set_ref("x", bad)


def test_manifest_roundtrip(store: Store) -> None:
    a = store.put(b"weights")
    b = store.put(b"kernel")
    meta = {"torch": "2.11", "nested": {"list": [1, 2.5, None, True]}, "name": "ünïcode"}
    digest = store.put_manifest([a, b], meta)
    assert store.get_manifest(digest) == ([a, b], meta)
    assert store.put_manifest([a, b], dict(reversed(list(meta.items())))) == digest
    blob = bytes(store.get(digest))
    assert blob.startswith(b"precompile-manifest\n{")
    assert store.get_manifest(store.put_manifest([], None)) == ([], {})
    assert store.put_manifest([b, a], meta) != digest


def test_manifest_needs_its_children(store: Store) -> None:
    a = store.put(b"a")
    with pytest.raises(MissingObjectError):
        store.put_manifest([a, "cd" * 32], {})
    with pytest.raises(ValueError):
        store.put_manifest(["nope"], {})


def test_manifest_meta_must_be_a_json_dict(store: Store) -> None:
    with pytest.raises(TypeError, match="dict"):
        store.put_manifest([], ["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        store.put_manifest([], {"x": object()})
    with pytest.raises(ValueError):
        store.put_manifest([], {"x": float("nan")})


def test_get_manifest_of_plain_blob_is_format_error(store: Store) -> None:
    with pytest.raises(FormatError, match="not a manifest"):
        store.get_manifest(store.put(b"just bytes"))
