"""Error classes, their hierarchy, and opening stores that are not ours."""

from __future__ import annotations

import errno
import importlib
from pathlib import Path

import pytest

import precompile
from precompile import (
    CorruptObjectError,
    FormatError,
    LockTimeout,
    MissingObjectError,
    Store,
    StoreError,
)


@pytest.mark.parametrize("cls", [StoreError, CorruptObjectError, MissingObjectError, LockTimeout, FormatError])
def test_exception_module_is_importable(cls: type[Exception]) -> None:
    module = importlib.import_module(cls.__module__)
    assert getattr(module, cls.__name__) is cls
    assert cls.__module__ == "precompile._core"
    assert issubclass(cls, StoreError) and issubclass(cls, Exception)


def test_raised_errors_have_the_right_type(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    with pytest.raises(MissingObjectError) as info:
        store.get("00" * 32)
    assert type(info.value).__module__ == "precompile._core"
    assert isinstance(info.value, StoreError)
    assert not isinstance(info.value, OSError)


STORE_NAMES = [
    "Blob",
    "BundleStats",
    "BundleVerifyReport",
    "CorruptObjectError",
    "EvictReport",
    "ExportReport",
    "FormatError",
    "GcReport",
    "ImportReport",
    "LockTimeout",
    "MissingObjectError",
    "RefUsage",
    "Stats",
    "Store",
    "StoreError",
    "Usage",
    "VerifyReport",
    "__version__",
    "blake3_hex",
]


def test_public_names() -> None:
    assert sorted(precompile.__all__) == precompile.__all__
    for name in STORE_NAMES:
        assert name in precompile.__all__
        assert getattr(precompile, name) is getattr(precompile._core, name)
    assert precompile.__version__.count(".") == 2


def test_unknown_format_version(tmp_path: Path) -> None:
    root = tmp_path / "s"
    Store(root)
    (root / "FORMAT").write_text("precompile-store\n2\n")
    with pytest.raises(FormatError, match='version "2" is not supported'):
        Store(root)


def test_bad_magic(tmp_path: Path) -> None:
    root = tmp_path / "s"
    Store(root)
    (root / "FORMAT").write_text("some-other-tool\n1\n")
    with pytest.raises(FormatError, match="not a precompile store"):
        Store(root, create=False)


def test_refuses_to_take_over_a_foreign_directory(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FormatError, match="not empty"):
        Store(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_create_false_without_store(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as info:
        Store(tmp_path / "absent", create=False)
    assert info.value.errno == errno.ENOENT
    assert info.value.filename == str(tmp_path / "absent")
    assert "create=False" in str(info.value)
    Store(tmp_path / "absent")
    Store(tmp_path / "absent", create=False)


def test_io_errors_map_to_oserror_subclasses(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    with pytest.raises(FileNotFoundError) as info:
        store.put_file(tmp_path / "no-such-file")
    assert info.value.filename == str(tmp_path / "no-such-file")
    with pytest.raises(IsADirectoryError):
        store.put_file(tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError):
        Store(tmp_path / "file" / "store")


def test_bad_timeouts_are_value_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="lock_timeout"):
        Store(tmp_path / "s", lock_timeout=-1)
    with pytest.raises(ValueError, match="grace_seconds"):
        Store(tmp_path / "s").gc(grace_seconds=float("nan"))
