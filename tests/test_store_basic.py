"""Putting and getting content of every size and buffer type."""

from __future__ import annotations

import array
import os
from pathlib import Path

import pytest
from blake3 import blake3

from precompile import Blob, Store, blake3_hex


@pytest.mark.parametrize("size", [0, 1, 1 << 20], ids=["0B", "1B", "1MiB"])
def test_put_get_roundtrip(store: Store, size: int) -> None:
    data = os.urandom(size)
    digest = store.put(data)
    assert digest == blake3(data).hexdigest()
    blob = store.get(digest)
    assert isinstance(blob, Blob)
    assert len(blob) == size
    assert bytes(blob) == data
    assert blob.digest == digest
    assert store.contains(digest)


@pytest.mark.slow
def test_put_get_one_gibibyte(store: Store) -> None:
    # 1 MiB of random bytes repeated: distinct chunks for the tree hash, and
    # built by memcpy rather than 1 GiB of urandom.
    data = os.urandom(1 << 20) * 1024
    expected = blake3(data, max_threads=blake3.AUTO).hexdigest()
    assert store.put(data) == expected
    assert store.put_with_status(data) == (expected, False)
    del data
    blob = store.get(expected)
    assert len(blob) == 1 << 30
    assert blake3(memoryview(blob), max_threads=blake3.AUTO).hexdigest() == expected
    assert Path(store.object_path(expected)).stat().st_size == 1 << 30


def test_put_with_status_reports_new_then_dedup(store: Store) -> None:
    digest, new = store.put_with_status(b"once")
    assert new
    assert store.put_with_status(b"once") == (digest, False)
    assert store.put(b"once") == digest
    stats = store.stats()
    assert stats.objects == 1
    assert stats.dedup_hits == 2
    assert stats.puts == 3


def test_accepts_any_contiguous_buffer(store: Store) -> None:
    raw = bytes(range(256)) * 64
    expected = blake3(raw).hexdigest()
    doubles = array.array("d", [1.5, -2.0, 3.25])
    assert store.put(bytearray(raw)) == expected
    assert store.put(memoryview(raw)) == expected
    assert store.put(memoryview(raw)[256:]) == blake3(raw[256:]).hexdigest()
    assert store.put(doubles) == blake3(doubles.tobytes()).hexdigest()
    assert store.put(store.get(expected)) == expected
    assert store.put(bytearray(100)) == blake3(bytes(100)).hexdigest()


def test_refuses_non_contiguous_and_non_buffers(store: Store) -> None:
    with pytest.raises(BufferError, match="contiguous"):
        store.put(memoryview(b"abcdef")[::2])
    with pytest.raises(TypeError):
        store.put("text is not bytes")  # type: ignore[arg-type]


def test_blake3_hex_matches_reference() -> None:
    for size in [0, 1, 2047, 2048, 1 << 20]:
        data = os.urandom(size)
        assert blake3_hex(data) == blake3(data).hexdigest()


def test_put_file_streams_a_file(store: Store, tmp_path: Path) -> None:
    src = tmp_path / "big.bin"
    chunk = os.urandom(1 << 20)
    with open(src, "wb") as f:
        for _ in range(48):
            f.write(chunk)
    digest = store.put_file(src)
    hasher = blake3()
    hasher.update_mmap(src)
    assert digest == hasher.hexdigest()
    assert store.put_file(str(src)) == digest
    assert store.put(chunk * 48) == digest
    assert store.stats().objects == 1
    empty = tmp_path / "empty"
    empty.touch()
    assert store.put_file(empty) == blake3(b"").hexdigest()


def test_layout_on_disk(store: Store) -> None:
    root = store.path
    assert root.is_absolute()
    assert (root / "FORMAT").read_text() == "precompile-store\n1\n"
    assert {p.name for p in root.iterdir()} == {"FORMAT", "objects", "refs", "tmp", "locks"}
    digest = store.put(b"layout")
    path = Path(store.object_path(digest))
    assert path == root / "objects" / digest[:2] / digest[2:]
    assert path.read_bytes() == b"layout"
    assert os.listdir(root / "tmp") == []
    assert repr(store) == f"Store('{root}')"
    assert repr(store.get(digest)) == f"Blob(digest='{digest}', len=6)"
