"""SIGKILL at random moments: puts, set_ref, GC, export and import run in
real child processes that are killed mid-operation, again and again. After
every kill the store verifies clean, every ref that was reported set still
names a complete entry, and no manifest on disk has lost a child."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.processes import STORE_WORKER

from precompile import Store

MAGIC = b"precompile-manifest\n"
OPS = ["put", "set_ref", "gc", "export", "import"]


def manifests_on_disk(root: Path) -> list[str]:
    found = []
    for fan in (root / "objects").iterdir():
        for obj in fan.iterdir():
            with open(obj, "rb") as f:
                if f.read(len(MAGIC)) == MAGIC:
                    found.append(fan.name + obj.name)
    return found


def check(store: Store, root: Path, completed: dict[str, str]) -> None:
    report = store.verify()
    assert report.ok, report
    for name, digest in completed.items():
        assert store.get_ref(name) == digest, name
        children, _ = store.get_manifest(digest)
        for child in children:
            inner, _ = store.get_manifest(child)
            assert len(store.get_many(inner)) == len(inner)
    # A GC killed part-way removes parents before children: whatever
    # manifest survives still has everything it lists.
    for manifest in manifests_on_disk(root):
        children, _ = store.get_manifest(manifest)
        for child in children:
            assert store.contains(child), (manifest, child)


def run_and_kill(root: Path, op: str, seed: int, bundle: Path, delay: float) -> list[str]:
    child = subprocess.Popen(
        [sys.executable, STORE_WORKER, "chaos", op, str(root), str(seed), str(bundle)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    time.sleep(delay)
    child.send_signal(signal.SIGKILL)
    child.wait()
    lines = child.stdout.read().splitlines()
    child.stdout.close()
    return lines


@pytest.mark.slow
def test_sigkill_loop(tmp_path: Path) -> None:
    kills = int(os.environ.get("PRECOMPILE_CHAOS_KILLS", "60"))
    root = tmp_path / "s"
    store = Store(root)
    # The bundle the import runs unpack: entries of their own.
    seedling = Store(tmp_path / "seed")
    for i in range(4):
        leaves = [seedling.put(os.urandom(50_000)) for _ in range(3)]
        inner = seedling.put_manifest(leaves, {"i": i})
        seedling.set_ref(f"imp/{i}", seedling.put_manifest([inner], {"top": i}))
    import_bundle = tmp_path / "import.bundle"
    seedling.export_bundle(None, import_bundle)
    imported = {name: seedling.get_ref(name) for name in seedling.refs()}
    export_bundle = tmp_path / "export.bundle"

    rng = random.Random(8)
    completed: dict[str, str] = {}
    survived = {op: 0 for op in OPS}
    for k in range(kills):
        op = OPS[k % len(OPS)]
        bundle = import_bundle if op == "import" else export_bundle
        # Short delays kill the first operation part-way; long ones let a few
        # complete and kill a later one.
        delay = rng.uniform(0.0, 0.03) if k % 2 else rng.uniform(0.1, 0.4)
        lines = run_and_kill(root, op, k, bundle, delay)
        for line in lines:
            parts = line.split()
            if len(parts) == 3 and parts[0] == "done":
                completed[parts[1]] = parts[2]
            elif parts == ["done"] and op == "import":
                completed.update(imported)
        try:
            check(store, root, completed)
        except AssertionError as e:
            raise AssertionError(f"after kill {k} during {op}: {e}") from e
        survived[op] += 1
    assert sum(survived.values()) == kills >= 50
    assert completed, "some operations completed between kills"
    print(f"\nkills survived: {survived}; refs completed and intact: {len(completed)}")
