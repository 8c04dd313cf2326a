"""Object opens never block and never hold one descriptor per object: a FIFO at an
object path is a typed error at once, and exporting many objects fits a low open-file
limit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from precompile import CorruptObjectError, MissingObjectError, Store, open_bundle
from precompile.cli import main
from precompile.remote import local_closure


def fifo_at(store: Store, digest: str) -> None:
    path = Path(store.object_path(digest))
    path.unlink()
    os.mkfifo(path)


def test_a_fifo_at_an_object_path_is_corrupt_without_blocking(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    leaf = store.put(b"leaf")
    top = store.put_manifest([leaf])
    store.set_ref("e", top)
    fifo_at(store, leaf)
    # The closure a push or a read-through pull walks.
    with pytest.raises(CorruptObjectError):
        local_closure(store, [top])
    with pytest.raises(CorruptObjectError):
        store.is_manifest(leaf)
    with pytest.raises(CorruptObjectError):
        store.size(leaf)
    with pytest.raises(MissingObjectError):
        store.is_manifest("0" * 64)
    assert store.is_manifest(top) and store.size(top) > 0
    fifo_at(store, top)
    with pytest.raises(CorruptObjectError):
        local_closure(store, [top])


def test_show_of_a_fifo_object_fails_at_once(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    leaf = store.put(b"leaf")
    store.set_ref("e", store.put_manifest([leaf]))
    fifo_at(store, leaf)
    # In a child with a timeout: before, the open blocked forever.
    proc = subprocess.run(
        [sys.executable, "-m", "precompile.cli", "--store", str(tmp_path / "s"), "show", "e"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "corrupt" in proc.stderr


EXPORT = """
import resource, sys
from precompile import Store
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[3]), resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
print(Store(sys.argv[1], create=False).export_bundle(["many"], sys.argv[2]).blobs)
"""


def test_export_holds_one_object_open_at_a_time(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    count, limit = 600, 256
    leaves = [store.put(f"object {i}".encode()) for i in range(count)]
    store.set_ref("many", store.put_manifest(leaves))
    out = tmp_path / "many.bundle"
    proc = subprocess.run(
        [sys.executable, "-c", EXPORT, str(tmp_path / "s"), str(out), str(limit)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) == count + 1
    bundle = open_bundle(out)
    assert bundle.verify().ok and bundle.get_ref("many") == store.get_ref("many")
    assert main(["--store", str(out), "verify"]) == 0
