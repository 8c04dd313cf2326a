"""Nothing outside the store is touched: symlinks inside it are refused,
never followed; killed exports leave nothing that blocks or piles up; a GC
waiting for a stopped writer does not stall other writers."""

from __future__ import annotations

import fcntl
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support.processes import STORE_WORKER

from precompile import InvalidNameError, LockTimeout, Store, StoreError
from precompile._core import GcReport


def outside_with_old_file(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim"
    victim.write_bytes(b"not the store's")
    os.utime(victim, (1_000_000, 1_000_000))
    return outside


@pytest.mark.parametrize("sub", ["tmp", "locks", "refs", "objects"])
def test_a_symlinked_store_directory_is_refused(tmp_path: Path, sub: str) -> None:
    root = tmp_path / "s"
    Store(root)
    outside = outside_with_old_file(tmp_path)
    os.rename(root / sub, tmp_path / f"{sub}.orig")
    (root / sub).symlink_to(outside)
    with pytest.raises(StoreError, match="symlink"):
        Store(root)
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]
    assert (outside / "victim").stat().st_mtime == 1_000_000


def test_gc_through_an_open_handle_never_follows_a_swapped_tmp(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = Store(root)
    outside = outside_with_old_file(tmp_path)
    os.rename(root / "tmp", tmp_path / "tmp.orig")
    (root / "tmp").symlink_to(outside)
    store.gc(False, 0.0)
    store.put(b"still writes")
    assert (outside / "victim").read_bytes() == b"not the store's"
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]


def test_a_symlinked_ref_namespace_is_never_followed(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    outside = outside_with_old_file(tmp_path)
    (tmp_path / "s" / "refs" / "ns").symlink_to(outside)
    digest = store.put(b"x")
    with pytest.raises(InvalidNameError, match="symlink"):
        store.set_ref("ns/planted", digest)
    with pytest.raises(InvalidNameError, match="symlink"):
        store.delete_ref("ns/victim")
    with pytest.raises(InvalidNameError, match="symlink"):
        store.get_ref("ns/victim")
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]
    assert store.refs() == []  # a link is not a namespace
    (tmp_path / "s" / "refs" / "file-link").symlink_to(outside / "victim")
    assert store.refs() == []
    store.gc(False, 0.0)
    assert (outside / "victim").exists()


def test_dedup_never_touches_a_symlink_target(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    data = b"content that also lives outside"
    digest = store.put(data)
    target = tmp_path / "target"
    target.write_bytes(data)
    os.utime(target, (1_000_000, 1_000_000))
    obj = Path(store.object_path(digest))
    obj.unlink()
    obj.symlink_to(target)
    assert store.put_with_status(data) == (digest, True)  # the link is replaced
    assert target.stat().st_mtime == 1_000_000
    assert obj.is_file() and not obj.is_symlink()


def tmp_leftovers(directory: Path, name: str) -> list[Path]:
    return [p for p in directory.iterdir() if p.name.startswith(f".{name}.") and p.name.endswith(".tmp")]


def test_killed_exports_leave_unpredictable_names_that_get_cleaned(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "s")
    for i in range(4):
        store.set_ref(f"big/{i}", store.put(os.urandom(4 << 20)))
    out = tmp_path / "out" / "all.bundle"
    out.parent.mkdir()
    for _ in range(2):
        child = subprocess.Popen(
            [
                sys.executable,
                STORE_WORKER,
                "export_forever",
                str(tmp_path / "s"),
                str(out),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 10
        while not tmp_leftovers(out.parent, "all.bundle") and time.monotonic() < deadline:
            time.sleep(0.002)
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
    leftovers = tmp_leftovers(out.parent, "all.bundle")
    assert leftovers, "the kill was meant to leave a partial bundle behind"
    for p in leftovers:
        assert re.fullmatch(r"\.all\.bundle\.[0-9a-f]{32}\.tmp", p.name), p.name
    # Young leftovers may belong to a running export: kept. Stale ones go.
    store.export_bundle(["big/0"], out)
    assert set(tmp_leftovers(out.parent, "all.bundle")) == set(leftovers)
    for p in leftovers:
        os.utime(p, (time.time() - 7200,) * 2)
    store.export_bundle(["big/0"], out)
    assert tmp_leftovers(out.parent, "all.bundle") == []


def test_a_waiting_gc_does_not_stall_unrelated_writers(tmp_path: Path) -> None:
    root = tmp_path / "s"
    Store(root)
    result: list[object] = []

    def collect() -> None:
        try:
            result.append(Store(root, lock_timeout=15.0).gc(False, 0.0))
        except LockTimeout as e:
            result.append(e)

    # A writer stopped while holding the lock shared (SIGSTOP, a hung disk).
    with open(root / "locks" / "gc.lock", "rb") as held:
        fcntl.flock(held, fcntl.LOCK_SH)
        collector = threading.Thread(target=collect)
        collector.start()
        time.sleep(0.3)
        writer = Store(root, lock_timeout=30.0)
        for i in range(5):
            start = time.monotonic()
            writer.set_ref(f"w{i}", writer.put(f"unrelated {i}".encode()))
            # Before, each waited out the GC's whole lock timeout.
            assert time.monotonic() - start < 3.0
    collector.join()
    assert isinstance(result[0], GcReport)
