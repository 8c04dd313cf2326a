"""Stores other users share, stores nobody may write, and full disks: real
uids (a forked child that drops to another uid), real read-only mounts and
a real, small tmpfs. These need root (CI runs as root); without it they skip."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from precompile import Store, StoreIOError

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: other uids, mounts")

GROUP = 23400
USER_A = 23401
USER_B = 23402


def as_user(uid: int, fn: Callable[[], Any]) -> Any:
    """Runs `fn` in a forked child as `uid` (group GROUP, umask 002) and
    returns its JSON-able result, or raises what it raised as a string."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read_end)
        try:
            os.setgroups([GROUP])
            os.setgid(GROUP)
            os.setuid(uid)
            os.umask(0o002)
            out = {"ok": fn()}
        except BaseException as e:
            out = {
                "error": f"{type(e).__name__}: {e}",
                "errno": getattr(e, "errno", None),
            }
        with os.fdopen(write_end, "w") as f:
            json.dump(out, f)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as f:
        text = f.read()
    os.waitpid(pid, 0)
    return json.loads(text)


@pytest.fixture
def tmpfs(world_dir: Path) -> Iterator[Path]:
    mnt = world_dir / "mnt"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=6m,mode=0755", "tmpfs", str(mnt)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


@needs_root
def test_group_shared_store_needs_no_write_access_to_others_objects(
    world_dir: Path,
) -> None:
    shared = world_dir / "shared"
    shared.mkdir()
    os.chown(shared, 0, GROUP)
    shared.chmod(0o2775)
    root = shared / "s"
    data = b"stored by A, deduplicated by B " * 100

    def user_a() -> tuple[str, str]:
        store = Store(root, shared=True)
        digest = store.put(data)
        store.set_ref("a", digest)
        return digest, store.object_path(digest)

    a = as_user(USER_A, user_a)
    digest, obj_path = a["ok"]
    obj = Path(obj_path)
    assert obj.stat().st_uid == USER_A
    # Old enough that a dedup hit must refresh it, and lock files as a
    # user with umask 022 would have left them: not group-writable.
    os.utime(obj, (time.time() - 7200,) * 2)
    for lock in (root / "locks").iterdir():
        lock.chmod(0o644)

    def user_b() -> dict[str, Any]:
        store = Store(root, shared=True)
        again, new = store.put_with_status(data)
        store.set_ref("b", again)
        store.set_ref("b2", store.put(b"B's own"))
        touched = store.touch_ref("a")
        return {
            "digest": again,
            "new": new,
            "gc": store.gc(False, 3600.0).to_dict(),
            "verify": store.verify().to_dict(),
            "touched": touched,
        }

    b = as_user(USER_B, user_b)
    assert "error" not in b, b
    assert b["ok"]["digest"] == digest and b["ok"]["new"] is False
    assert b["ok"]["verify"]["ok"] and b["ok"]["touched"]
    assert (root / "refs" / "a").stat().st_uid == USER_B  # recency of A's ref, recorded by B
    # Recency was recorded without touching A's file: B's fresh copy replaced it.
    assert time.time() - obj.stat().st_mtime < 600
    assert obj.stat().st_uid == USER_B and obj.read_bytes() == data
    assert as_user(USER_A, lambda: Store(root, shared=True).verify().ok)["ok"]


@needs_root
def test_read_only_mount_can_be_verified_and_exported(tmpfs: Path, world_dir: Path) -> None:
    root = tmpfs / "s"
    store = Store(root)
    leaves = [store.put(f"leaf {i}".encode() * 100) for i in range(3)]
    store.set_ref("e", store.put_manifest(leaves, {"k": 1}))
    del store
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    store = Store(root)
    assert store.verify().ok
    out = world_dir / "e.bundle"
    assert store.export_bundle(["e"], out).refs == 1
    with pytest.raises(StoreIOError) as info:
        store.put(b"new content")
    assert info.value.errno == errno.EROFS


@needs_root
def test_store_of_another_user_can_be_read_not_written(world_dir: Path) -> None:
    root = world_dir / "s"
    store = Store(root)
    store.set_ref("e", store.put(b"root's entry"))
    # Lock files another user cannot even create: only readable ones exist.
    for lock in (root / "locks").iterdir():
        lock.chmod(0o444)

    def reader() -> dict[str, Any]:
        s = Store(root, shared=True)
        report = s.verify().to_dict()
        try:
            s.put(b"not allowed")
        except StoreIOError as e:
            return {
                "verify": report,
                "errno": e.errno,
                "is_permission": isinstance(e, PermissionError),
            }
        return {"verify": report, "errno": None}

    out = as_user(USER_A, reader)
    assert "error" not in out, out
    assert out["ok"]["verify"]["ok"]
    assert out["ok"]["errno"] == errno.EACCES and out["ok"]["is_permission"]


@needs_root
def test_disk_full_is_a_store_error_and_recoverable(tmpfs: Path) -> None:
    filler = tmpfs / "filler"
    filler.write_bytes(b"\0" * (1 << 20))
    store = Store(tmpfs / "s")
    kept = store.put(b"kept")
    store.set_ref("kept", kept)
    stored = []
    with pytest.raises(StoreIOError) as info:
        for i in range(64):
            stored.append(store.put(os.urandom(256 << 10) + bytes([i])))
    assert info.value.errno == errno.ENOSPC and isinstance(info.value, OSError)
    assert stored, "some puts fit before the disk filled"
    assert list((tmpfs / "s" / "tmp").iterdir()) == []  # the partial write is gone
    report = store.verify()
    assert report.ok and report.objects == len(stored) + 1
    filler.unlink()
    again = store.put(os.urandom(256 << 10))
    assert len(store.get(again)) == 256 << 10
    assert bytes(store.get(kept)) == b"kept"
