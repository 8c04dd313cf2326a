"""Many real processes writing, crashing and collecting garbage at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from blake3 import blake3
from support.processes import STORE_WORKER

from precompile import LockTimeout, Store


def start(*args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, STORE_WORKER, *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def assert_clean(store: Store) -> None:
    report = store.verify()
    assert report.ok, report
    assert report.corrupt == [] and report.missing == []


def test_eight_processes_put_and_get_overlapping_content(tmp_path: Path) -> None:
    root = tmp_path / "store"
    Store(root)
    procs = [start("putget", root, worker, 120) for worker in range(8)]
    results = [finish(p) for p in procs]

    store = Store(root)
    seen: dict[str, str] = {}
    for result in results:
        for i, digest in result.items():
            assert seen.setdefault(i, digest) == digest
    assert len(seen) > 32  # the workers really overlapped on a shared pool
    for digest in seen.values():
        assert blake3(memoryview(store.get(digest))).hexdigest() == digest
    assert store.stats().objects == len(seen)
    assert os.listdir(root / "tmp") == []
    assert_clean(store)


def test_sigkill_mid_put_leaves_no_partial_object(tmp_path: Path) -> None:
    root = tmp_path / "store"
    Store(root)
    with subprocess.Popen(
        [sys.executable, STORE_WORKER, "spam", str(root), "1000"], stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        announced = []
        for line in proc.stdout:
            announced.append(line.split()[2])
            if len(announced) == 150:
                break
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
        announced += [line.split()[2] for line in proc.stdout if line.startswith("ok ")]

    store = Store(root)
    assert 150 <= len(announced) < 1000
    for digest in announced:
        assert store.contains(digest)
    # Every visible object is complete (verify rehashes all of them), and
    # it is one the child was writing: at most one put was cut short after
    # its object became visible but before it was announced.
    objects = store.stats().objects
    assert len(announced) <= objects <= len(announced) + 1
    assert_clean(store)
    # The killed put may have left its tmp file; GC reclaims it.
    leftover = len(os.listdir(root / "tmp"))
    assert store.gc(grace_seconds=0).tmp_freed == leftover
    assert os.listdir(root / "tmp") == []


@pytest.mark.timeout(120)
def test_gc_loop_beside_writers_loses_nothing_a_ref_reaches(tmp_path: Path) -> None:
    root = tmp_path / "store"
    Store(root)
    seconds = 6
    writers = [start("writer", root, worker, seconds) for worker in range(3)]
    collector = start("gc-loop", root, seconds + 1, 0.5)
    writer_results = [finish(w) for w in writers]
    gc_result = finish(collector)

    assert all(r["rounds"] > 10 for r in writer_results), writer_results
    assert gc_result["runs"] > 5 and gc_result["freed"] > 0, gc_result
    store = Store(root)
    refs = store.refs()
    assert refs
    for name in refs:
        manifest = store.get_ref(name)
        assert manifest is not None
        children, meta = store.get_manifest(manifest)
        assert name.startswith(f"w{meta['worker']}/")
        for child in children:
            assert blake3(memoryview(store.get(child))).hexdigest() == child
    assert_clean(store)
    # Once the grace period is over, what is left is exactly the closure.
    store.gc(grace_seconds=0)
    reachable = set()
    for name in refs:
        manifest = store.get_ref(name)
        assert manifest is not None
        reachable.add(manifest)
        reachable.update(store.get_manifest(manifest)[0])
    assert store.stats().objects == len(reachable)


def test_lock_timeout_when_another_process_holds_gc_lock(tmp_path: Path) -> None:
    root = tmp_path / "store"
    digest = Store(root).put(b"already here")
    store = Store(root, lock_timeout=0.3)
    lock = root / "locks" / "gc.lock"

    with start("hold-lock", lock, "exclusive") as holder:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        t0 = time.monotonic()
        with pytest.raises(LockTimeout, match="gc.lock"):
            store.gc()
        waited = time.monotonic() - t0
        assert 0.3 <= waited < 5
        with pytest.raises(LockTimeout):
            store.put(b"a writer waits for GC too")
        # Readers take no locks.
        assert bytes(store.get(digest)) == b"already here"
        holder.communicate("")

    with start("hold-lock", lock, "shared") as holder:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        with pytest.raises(LockTimeout):
            store.gc()
        store.put(b"writers share the lock")
        holder.communicate("")

    assert store.gc(dry_run=True).dry_run is True
