"""Bad input gets a typed error, promptly, and loses nothing: control
characters in names, inexact integers, special files, ref conflicts on
import, and every failure a StoreError."""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path

import pytest

from precompile import (
    FormatError,
    InvalidDigestError,
    InvalidNameError,
    RefConflictError,
    RefNotFoundError,
    Store,
    StoreError,
    StoreIOError,
    open_bundle,
)


@pytest.mark.parametrize(
    "name",
    [
        "a\x1b[31mred",
        "cr\rlf",
        "line\nbreak",
        "tab\tx",
        "del\x7f",
        "c1\x9b2J",
        "bell\x07",
    ],
)
def test_ref_names_with_control_characters_are_refused(tmp_path: Path, name: str) -> None:
    store = Store(tmp_path / "s")
    digest = store.put(b"x")
    with pytest.raises(InvalidNameError, match="control character") as info:
        store.set_ref(name, digest)
    assert isinstance(info.value, StoreError) and isinstance(info.value, ValueError)
    assert store.refs() == []
    store.set_ref("caf\u00e9/\u65e5\u672c", digest)  # printable non-ASCII stays fine


@pytest.mark.parametrize("value", [2**63 - 1, -(2**63), 2**64 - 1, 0, -1])
def test_manifest_integers_come_back_exactly(tmp_path: Path, value: int) -> None:
    store = Store(tmp_path / "s")
    digest = store.put_manifest([], {"n": value, "nested": [{"m": value}]})
    _, meta = store.get_manifest(digest)
    assert meta == {"n": value, "nested": [{"m": value}]}
    assert type(meta["n"]) is int


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1, 10**30])
def test_manifest_integers_out_of_range_are_refused(tmp_path: Path, value: int) -> None:
    store = Store(tmp_path / "s")
    with pytest.raises(FormatError, match="kept exactly"):
        store.put_manifest([], {"n": value})
    with pytest.raises(FormatError):
        store.put_manifest([], {"deep": [1, {"x": (value,)}]})
    assert store.stats().objects == 0


def test_special_files_are_refused_promptly(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    calls = [
        lambda: store.put_file(fifo),
        lambda: store.put_file("/dev/zero"),
        lambda: open_bundle(fifo),
        lambda: open_bundle("/dev/zero"),
        lambda: store.import_bundle(fifo, allow_unsigned=True),
    ]
    for call in calls:
        start = time.monotonic()
        with pytest.raises(StoreIOError) as info:
            call()
        assert time.monotonic() - start < 2
        assert info.value.errno == errno.EINVAL and "regular file" in str(info.value)
    with pytest.raises(IsADirectoryError):
        store.put_file(tmp_path)


def test_a_fifo_with_a_writer_is_still_refused(tmp_path: Path) -> None:
    """Even once the open could succeed, nothing is read from a FIFO."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    store = Store(tmp_path / "s")
    writer = threading.Thread(target=lambda: open(fifo, "wb").close(), daemon=True)
    writer.start()
    with pytest.raises(StoreIOError):
        store.put_file(fifo)
    # Unblock the writer thread if its open is still waiting for a reader.
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    writer.join(5)
    os.close(fd)


def test_import_sets_every_ref_it_can_then_reports_conflicts(tmp_path: Path) -> None:
    source = Store(tmp_path / "src")
    digests = {name: source.put(name.encode()) for name in ["a/b", "c", "n", "z"]}
    for name, digest in digests.items():
        source.set_ref(name, digest)
    bundle = tmp_path / "b.bundle"
    source.export_bundle(None, bundle)

    target = Store(tmp_path / "dst")
    mine = target.put(b"mine")
    target.set_ref("a", mine)  # a ref where the bundle needs a namespace
    target.set_ref("n/x", mine)  # a namespace where the bundle has a ref
    with pytest.raises(RefConflictError) as info:
        target.import_bundle(bundle, allow_unsigned=True)
    assert sorted(name for name, _ in info.value.conflicts) == ["a/b", "n"]
    assert isinstance(info.value, StoreError)
    assert target.get_ref("c") == digests["c"] and target.get_ref("z") == digests["z"]
    assert target.get_ref("a") == mine and target.get_ref("n/x") == mine
    assert target.verify().ok


def test_every_failure_is_a_store_error(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    with pytest.raises(InvalidDigestError) as digest_error:
        store.get("nothex")
    assert isinstance(digest_error.value, ValueError)
    with pytest.raises(RefNotFoundError) as ref_error:
        store.export_bundle(["nope"], tmp_path / "x.bundle")
    assert isinstance(ref_error.value, LookupError)
    (tmp_path / "s" / "refs" / "latin1").write_bytes(b"\xff\xfe not utf-8\n")
    with pytest.raises(FormatError):
        store.get_ref("latin1")
    with pytest.raises(FormatError):
        store.gc(False, 0.0)
    with pytest.raises(StoreIOError) as missing:
        Store(tmp_path / "absent", create=False)
    assert isinstance(missing.value, FileNotFoundError) and missing.value.errno == errno.ENOENT
    with pytest.raises(StoreIOError) as not_found:
        store.put_file(tmp_path / "no-such-file")
    assert not_found.value.filename == str(tmp_path / "no-such-file")


def test_new_error_classes_are_importable_and_rooted_in_store_error() -> None:
    import importlib

    from precompile import _core

    pairs = {
        "StoreIOError": OSError,
        "StoreFileNotFoundError": FileNotFoundError,
        "StorePermissionError": PermissionError,
        "StoreFileExistsError": FileExistsError,
        "StoreIsADirectoryError": IsADirectoryError,
        "StoreNotADirectoryError": NotADirectoryError,
        "InvalidNameError": ValueError,
        "InvalidDigestError": ValueError,
        "RefNotFoundError": LookupError,
        "RefConflictError": StoreError,
    }
    for name, builtin in pairs.items():
        cls = getattr(_core, name)
        assert cls.__module__ == "precompile._core" and cls.__name__ == name
        assert getattr(importlib.import_module(cls.__module__), name) is cls
        assert issubclass(cls, StoreError) and issubclass(cls, builtin)
    assert issubclass(_core.StoreFileNotFoundError, StoreIOError)
