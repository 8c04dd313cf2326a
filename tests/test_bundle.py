"""Bundles through the public API: export, import, zero-copy reads, layers,
and malformed files."""

from __future__ import annotations

import gc
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from blake3 import blake3
from support.buffers import buffer_address, mapped_file
from support.synthetic import blob_bytes, load_entry, make_entries

from precompile import (
    Bundle,
    CorruptObjectError,
    FormatError,
    MissingObjectError,
    RefNotFoundError,
    Store,
    open_bundle,
)
from precompile.bundle import load_all
from precompile.layers import open_layered

# Header fields after magic, version, flags, page_align, min_align (see rust/bundle/format.rs).
HEADER = struct.Struct("<8sIIII8Q")
FIELDS = ("blob_count", "ref_count", "data_offset", "data_len", "index_offset", "index_len", "refs_offset", "refs_len")
TRAILER = 40


@pytest.fixture
def exported(tmp_path: Path) -> tuple[Store, dict[str, str], Path]:
    store = Store(tmp_path / "src")
    refs = make_entries(store, 3)
    path = tmp_path / "out.bundle"
    store.export_bundle(None, path)
    return store, refs, path


def test_round_trip_through_the_api(exported: tuple[Store, dict[str, str], Path], tmp_path: Path) -> None:
    src, refs, path = exported
    src.put(b"garbage, reached by no ref")
    bundle = open_bundle(path)
    assert isinstance(bundle, Bundle)
    assert bundle.refs() == sorted(refs) and bundle.refs("dynamo/e1") == ["dynamo/e1"]
    assert len(bundle) == len({d for digest in refs.values() for d in bundle.closure(digest)})
    assert not bundle.contains(blake3(b"garbage, reached by no ref").hexdigest())

    dst = Store(tmp_path / "dst")
    report = dst.import_bundle(path, allow_unsigned=True)
    assert report.objects_new == len(bundle) and report.objects_present == 0
    assert report.refs == report.refs_changed == len(refs)
    for ref, digest in refs.items():
        assert dst.get_ref(ref) == digest
        assert load_entry(dst, ref) == load_entry(src, ref) == load_entry(bundle, ref)
    assert dst.verify().ok


def test_import_is_idempotent_and_dedups(exported: tuple[Store, dict[str, str], Path], tmp_path: Path) -> None:
    _, refs, path = exported
    dst = Store(tmp_path / "dst")
    already = dst.put(blob_bytes("shared-0", 256 << 10))  # the blob every entry shares
    first = dst.import_bundle(path, allow_unsigned=True)
    assert first.objects_present == 1
    objects = dst.stats().objects
    mtimes = {ref: dst.ref_mtime(ref) for ref in refs}

    again = dst.import_bundle(path, allow_unsigned=True)
    assert again.to_dict() == {**again.to_dict(), "objects_new": 0, "bytes_new": 0, "refs_changed": 0}
    assert again.objects_present == objects and again.refs == len(refs)
    assert dst.stats().objects == objects
    assert {ref: dst.ref_mtime(ref) for ref in refs} == mtimes  # untouched: use times stay honest
    assert dst.contains(already)


def test_export_of_named_refs_holds_just_their_closure(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    refs = make_entries(store, 3)
    path = tmp_path / "one.bundle"
    summary = store.export_bundle(["dynamo/e2"], path)
    bundle = open_bundle(path)
    assert summary.refs == 1 and bundle.refs() == ["dynamo/e2"]
    assert sorted(bundle.closure(refs["dynamo/e2"])) == bundle.digests()
    with pytest.raises(RefNotFoundError, match="no such ref"):
        store.export_bundle(["dynamo/nope"], tmp_path / "x.bundle")
    with pytest.raises(TypeError):
        store.export_bundle("dynamo/e2", tmp_path / "x.bundle")  # type: ignore[arg-type]
    assert not (tmp_path / "x.bundle").exists()


def test_get_is_zero_copy_from_the_mapping(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    big = blob_bytes("big", 3 << 20)
    digest = store.put(big)
    store.set_ref("big", digest)
    path = tmp_path / "big.bundle"
    store.export_bundle(None, path)

    bundle = open_bundle(path)
    blob = bundle.get(digest)
    view = memoryview(blob)
    assert view.readonly and view.obj is blob and len(blob) == len(big) and blob.digest == digest
    address = buffer_address(blob)
    assert mapped_file(address) == str(path)
    assert address % 4096 == 0  # large blobs are page-aligned in the file
    assert buffer_address(bundle.get(digest)) == address  # a second get maps the same bytes
    assert view == big
    with pytest.raises(TypeError):
        view[0] = 1  # type: ignore[index]
    # The blob keeps the mapping alive on its own.
    del bundle, view
    gc.collect()
    assert bytes(blob) == big


def test_manifests_closure_and_load_all(exported: tuple[Store, dict[str, str], Path]) -> None:
    src, refs, path = exported
    bundle = open_bundle(path)
    entry = refs["dynamo/e0"]
    assert bundle.get_manifest(entry) == src.get_manifest(entry)
    closure = bundle.closure(entry)
    assert closure[0] == entry and len(set(closure)) == len(closure)
    assert sum(bundle.size(d) for d in closure) == load_entry(bundle, "dynamo/e0")["bytes"]
    loaded = load_all(bundle)
    assert loaded.keys() == refs.keys() and loaded["dynamo/e0"] == closure
    with pytest.raises(KeyError):
        load_all(bundle, ["dynamo/nope"])
    with pytest.raises(FormatError):
        bundle.get_manifest(closure[-1])  # a leaf, not a manifest
    absent = blake3(b"absent").hexdigest()
    assert not bundle.contains(absent) and bundle.get_ref("dynamo/nope") is None
    with pytest.raises(MissingObjectError):
        bundle.get(absent)
    with pytest.raises(ValueError):
        bundle.get("not a digest")
    stats = bundle.stats()
    assert stats.misses == 1 and stats.gets > 0 and stats.refs == len(refs)


def test_layers_answer_through_bundles_and_the_local_store(tmp_path: Path) -> None:
    one, two = Store(tmp_path / "one"), Store(tmp_path / "two")
    refs_one = make_entries(one, 2, seed=1)
    two_refs = make_entries(two, 3, seed=2)  # names overlap: dynamo/e0, dynamo/e1
    one.export_bundle(None, tmp_path / "one.bundle")
    two.export_bundle(None, tmp_path / "two.bundle")

    layered = open_layered(
        str(tmp_path / "local"), [str(tmp_path / "one.bundle"), str(tmp_path / "two.bundle")], allow_unsigned=True
    )
    assert layered.refs() == sorted(set(refs_one) | set(two_refs))
    assert layered.get_ref("dynamo/e0") == refs_one["dynamo/e0"]  # earlier layers win
    assert layered.get_ref("dynamo/e2") == two_refs["dynamo/e2"]
    for ref in layered.refs():
        assert load_entry(layered, ref)["digest"] == layered.get_ref(ref)

    # What the serving host writes itself goes to, and is read from, the local store first.
    local = Store(tmp_path / "local")
    local.set_ref("dynamo/e0", local.put(b"compiled here"))
    assert layered.get_ref("dynamo/e0") == blake3(b"compiled here").hexdigest()
    assert bytes(layered.get(layered.get_ref("dynamo/e0"))) == b"compiled here"
    with pytest.raises(MissingObjectError):
        layered.get(blake3(b"nowhere").hexdigest())


def test_corrupt_blob_is_caught_on_get_verify_and_import(
    exported: tuple[Store, dict[str, str], Path], tmp_path: Path
) -> None:
    src, refs, path = exported
    bundle = open_bundle(path)
    victim = bundle.closure(refs["dynamo/e1"])[-1]
    assert victim not in bundle.closure(refs["dynamo/e0"])
    offset = _blob_offset(path, victim)
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(data)  # blob bytes are not covered by the trailer: it still opens

    bundle = open_bundle(path)
    with pytest.raises(CorruptObjectError):
        bundle.get(victim)
    assert bytes(open_bundle(path, verify=False).get(victim))[0] == data[offset]
    report = bundle.verify()
    assert report.corrupt == [victim] and not report.ok
    assert bundle.verify(parallel=False).corrupt == [victim]
    assert bundle.verify_blobs(bundle.closure(refs["dynamo/e1"])) == [victim]
    with pytest.raises(CorruptObjectError):
        load_all(bundle)

    dst = Store(tmp_path / "dst")
    with pytest.raises(CorruptObjectError, match=victim):
        dst.import_bundle(path, allow_unsigned=True)
    assert dst.get_ref("dynamo/e1") is None  # never set on top of a hole
    assert dst.get_ref("dynamo/e0") == refs["dynamo/e0"]
    assert not dst.contains(victim) and dst.verify().ok


def test_progress_callbacks_report_and_can_stop(exported: tuple[Store, dict[str, str], Path], tmp_path: Path) -> None:
    src, _, path = exported
    calls: list[tuple[int, int]] = []
    src.verify(progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1][0] == calls[-1][1] == src.stats().bytes

    def fail(done: int, total: int) -> None:
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        open_bundle(path).verify(progress=fail)
    with pytest.raises(RuntimeError, match="stop"):
        src.export_bundle(None, tmp_path / "stopped.bundle", progress=fail)


# -- malformed bundles ------------------------------------------------------


def _header(data: bytes | bytearray) -> dict[str, int]:
    return dict(zip(FIELDS, HEADER.unpack_from(data)[5:]))


def _reseal(data: bytearray) -> bytearray:
    """Recomputes the trailer hash, so that only the edit itself is wrong."""
    end = len(data) - TRAILER
    data[end : end + 32] = blake3(bytes(data[:128]) + bytes(data[_header(data)["index_offset"] : end])).digest()
    return data


def _blob_offset(path: Path, digest: str) -> int:
    data = path.read_bytes()
    h = _header(data)
    digests = h["index_offset"] + 2048
    i = [data[digests + 32 * k : digests + 32 * (k + 1)].hex() for k in range(h["blob_count"])].index(digest)
    entry = digests + 32 * h["blob_count"] + 16 * i
    return int.from_bytes(data[entry : entry + 8], "little")


def _put_u64(data: bytearray, at: int, value: int) -> None:
    data[at : at + 8] = value.to_bytes(8, "little")


def _flip_index_byte(data: bytearray) -> bytearray:
    data[_header(data)["index_offset"] + 2048] ^= 0x80  # first byte of the first digest
    return data


def _offset_past_eof(data: bytearray) -> bytearray:
    h = _header(data)
    _put_u64(data, h["index_offset"] + 2048 + 32 * h["blob_count"], (len(data) // 4096 + 2) * 4096)
    return _reseal(data)


def _huge_length(data: bytearray) -> bytearray:
    h = _header(data)
    _put_u64(data, h["index_offset"] + 2048 + 32 * h["blob_count"] + 8, 2**64 - 1)
    return _reseal(data)


def _duplicate_digest(data: bytearray) -> bytearray:
    at = _header(data)["index_offset"] + 2048
    data[at + 32 : at + 64] = data[at : at + 32]
    return _reseal(data)


def _ref_to_absent_blob(data: bytearray) -> bytearray:
    at = _header(data)["refs_offset"] + 8  # past the count: u16 name length, name, digest
    name_len = int.from_bytes(data[at : at + 2], "little")
    data[at + 2 + name_len] ^= 0xFF
    return _reseal(data)


MALFORMED: dict[str, Callable[[bytearray], bytearray]] = {
    "empty": lambda d: bytearray(),
    "truncated-to-header": lambda d: d[:128],
    "truncated-half": lambda d: d[: len(d) // 2],
    "truncated-last-byte": lambda d: d[:-1],
    "bad-magic": lambda d: _reseal(bytearray(b"XCBUNDLE") + d[8:]),
    "future-version": lambda d: _reseal(d[:8] + (2).to_bytes(4, "little") + d[12:]),
    "flipped-index-byte": _flip_index_byte,
    "flipped-index-byte-resealed": lambda d: _reseal(_flip_index_byte(d)),
    "offset-past-eof": _offset_past_eof,
    "huge-blob-length": _huge_length,
    "huge-blob-count": lambda d: _reseal(d[:24] + (2**62).to_bytes(8, "little") + d[32:]),
    "huge-ref-count": lambda d: _reseal(d[:32] + (2**60).to_bytes(8, "little") + d[40:]),
    "duplicate-digest": _duplicate_digest,
    "ref-to-absent-blob": _ref_to_absent_blob,
}


@pytest.mark.parametrize("damage", list(MALFORMED))
def test_malformed_bundles_raise_format_error(
    damage: str, exported: tuple[Store, dict[str, str], Path], tmp_path: Path
) -> None:
    _, _, path = exported
    bad = tmp_path / f"{damage}.bundle"
    bad.write_bytes(MALFORMED[damage](bytearray(path.read_bytes())))
    with pytest.raises(FormatError):
        open_bundle(bad)
    # Nothing of a malformed bundle is trusted: import writes nothing at all.
    dst = Store(tmp_path / "dst")
    with pytest.raises(FormatError):
        dst.import_bundle(bad, allow_unsigned=True)
    assert dst.stats().objects == 0 and dst.refs() == []
