"""Child-process roles for the multi-process store tests.

Run as `python store_worker.py ROLE ARGS...`; each role prints its results
as JSON on the last line of stdout.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import random
import sys
import time

from precompile import MissingObjectError, Store


def content(tag: str, i: int, size: int) -> bytes:
    """Deterministic content, so the parent can recompute what was written."""
    seed = hashlib.sha256(f"{tag}:{i}".encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def putget(root: str, worker: int, count: int) -> None:
    """Puts blobs from a pool shared by all workers, reading each back."""
    store = Store(root)
    rng = random.Random(worker)
    digests = {}
    for _ in range(count):
        i = rng.randrange(64)
        data = content("pool", i, 1024 + (i * 4099) % (256 * 1024))
        digest = store.put(data)
        if bytes(store.get(digest)) != data:
            raise AssertionError(f"read back wrong bytes for {i}")
        digests[i] = digest
    print(json.dumps(digests))


def spam(root: str, count: int) -> None:
    """Puts `count` distinct blobs, announcing each one once it is stored."""
    store = Store(root)
    for i in range(count):
        digest = store.put(content("spam", i, 64 * 1024 + i))
        print(f"ok {i} {digest}", flush=True)
    print(json.dumps({"done": count}))


def writer(root: str, worker: int, seconds: float) -> None:
    """Writes children, manifests over them and refs to those manifests, in
    a loop, replacing and deleting refs so that garbage keeps appearing."""
    store = Store(root)
    rng = random.Random(worker)
    rounds = retries = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            children = [store.put(content(f"w{worker}", rounds * 3 + k, 100 + k * 997)) for k in range(2)]
            # Content shared by every writer, so dedup hits race with GC too.
            children.append(store.put(content("shared", rng.randrange(8), 5000)))
            manifest = store.put_manifest(children, {"worker": worker, "round": rounds})
            store.set_ref(f"w{worker}/{rng.randrange(6)}", manifest)
            if rng.random() < 0.2:
                store.delete_ref(f"w{worker}/{rng.randrange(6)}")
        except MissingObjectError:
            # GC swept something between our put and the write naming it
            # (it was older than the grace period): redo the round.
            retries += 1
            continue
        rounds += 1
    print(json.dumps({"rounds": rounds, "retries": retries}))


def gc_loop(root: str, seconds: float, grace: float) -> None:
    store = Store(root)
    runs = freed = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        freed += store.gc(grace_seconds=grace).objects_freed
        runs += 1
    print(json.dumps({"runs": runs, "freed": freed}))


def hold_lock(path: str, mode: str) -> None:
    """Holds the flock on `path` until stdin is closed."""
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX if mode == "exclusive" else fcntl.LOCK_SH)
        print("locked", flush=True)
        sys.stdin.read()


def export_forever(root: str, out: str) -> None:
    """Exports every ref to `out` over and over, until killed."""
    store = Store(root)
    print("ready", flush=True)
    while True:
        store.export_bundle(None, out)


def chaos(op: str, root: str, seed: int, bundle: str) -> None:
    """Repeats one store operation until killed, printing `done REF DIGEST`
    once a ref is set (or, for gc/export, `done`) so the parent knows what
    completed before the kill."""
    store = Store(root)
    rng = random.Random(seed)
    print("ready", flush=True)
    n = 0
    while True:
        n += 1
        if op in ("put", "set_ref"):
            leaves = [store.put(content(f"chaos{seed}", n * 4 + k, rng.choice([100, 5000, 300_000]))) for k in range(3)]
            # Content other runs also write, so dedup hits race with kills.
            leaves.append(store.put(content("chaos-shared", rng.randrange(16), 20_000)))
            inner = store.put_manifest(leaves, {"n": n})
            top = store.put_manifest([inner], {"seed": seed})
            name = f"{op}/{seed}/{n}"
            store.set_ref(name, top)
            print(f"done {name} {top}", flush=True)
        elif op == "gc":
            store.gc(False, 0.0)
            print("done", flush=True)
        elif op == "export":
            store.export_bundle(None, bundle)
            print("done", flush=True)
        elif op == "import":
            store.import_bundle(bundle, allow_unsigned=True)
            print("done", flush=True)
        else:
            raise SystemExit(f"unknown op {op}")


def main() -> None:
    role, *args = sys.argv[1:]
    if role == "putget":
        putget(args[0], int(args[1]), int(args[2]))
    elif role == "spam":
        spam(args[0], int(args[1]))
    elif role == "writer":
        writer(args[0], int(args[1]), float(args[2]))
    elif role == "gc-loop":
        gc_loop(args[0], float(args[1]), float(args[2]))
    elif role == "hold-lock":
        hold_lock(args[0], args[1])
    elif role == "export_forever":
        export_forever(args[0], args[1])
    elif role == "chaos":
        chaos(args[0], args[1], int(args[2]), args[3])
    else:
        raise SystemExit(f"unknown role {role}")


if __name__ == "__main__":
    main()
