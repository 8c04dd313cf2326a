"""Synthetic entries shaped like precompile's (entry -> backends -> blobs),
and a loader that reads one back through any store-like source.

Importable by tests and by worker processes (it needs only precompile).
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from blake3 import blake3

MAGIC = b"precompile-manifest\n"


def blob_bytes(tag: str, size: int) -> bytes:
    """Deterministic content of `size` bytes."""
    seed = hashlib.sha256(tag.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def make_entries(store: Any, count: int, *, seed: int = 0, shared_kib: int = 256) -> dict[str, str]:
    """Writes `count` entries under refs `dynamo/e<i>` and returns {ref: digest}.

    Each entry has two backend manifests of a few blobs of mixed sizes (64 B
    to ~1 MiB); every entry also reaches one shared blob, as compiled entries
    share kernels and runtime files.
    """
    rng = random.Random(seed)
    shared = store.put(blob_bytes(f"shared-{seed}", shared_kib << 10))
    refs = {}
    for i in range(count):
        backends = []
        for b in range(2):
            sizes = [rng.choice([64, 700, 5000, 40_000, 300_000, 1_100_000]) for _ in range(3)]
            leaves = [store.put(blob_bytes(f"{seed}-{i}-{b}-{j}", n)) for j, n in enumerate(sizes)]
            backends.append(store.put_manifest([*leaves, shared], {"kind": "backend", "n": b}))
        entry = store.put_manifest(backends, {"kind": "entry", "key": f"e{i}"})
        store.set_ref(f"dynamo/e{i}", entry)
        refs[f"dynamo/e{i}"] = entry
    return refs


def load_entry(source: Any, ref: str) -> dict[str, Any]:
    """Reads every blob an entry reaches through `source` (Store, Bundle or
    LayeredStore) and checks each against its digest.

    Returns the entry's digest, blob count, byte count and one hash over all
    the content in walk order, so that loads can be compared across threads
    and processes.
    """
    digest = source.get_ref(ref)
    assert digest is not None, ref
    total = blake3()
    stack, seen, nbytes = [digest], set(), 0
    while stack:
        d = stack.pop()
        if d in seen:
            continue
        seen.add(d)
        view = memoryview(source.get(d))
        assert blake3(view).hexdigest() == d
        total.update(view)
        nbytes += len(view)
        if view[: len(MAGIC)] == MAGIC:
            children, _ = source.get_manifest(d)
            stack.extend(reversed(children))
    return {"digest": digest, "blobs": len(seen), "bytes": nbytes, "content": total.hexdigest()}
