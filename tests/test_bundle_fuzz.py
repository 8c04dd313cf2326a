"""Mutation fuzz of the bundle parser through the public API: tens of
thousands of damaged bundles, each either refused with a StoreError or
opened into a bundle whose every read is checked. Half the mutants are
re-sealed (the trailer hash recomputed) so they get past the checksum to the
header, index, refs and manifest parsers behind it. The manifest decoder
has its own fuzz in Rust (`manifest::tests::mutants_never_panic`)."""

from __future__ import annotations

import os
import random
import shutil
import struct
import tempfile
import time
from pathlib import Path

import pytest
from blake3 import blake3

from precompile import Store, StoreError, open_bundle

HEADER_LEN = 128
TRAILER_LEN = 40


def build(tmp_path: Path) -> bytes:
    store = Store(tmp_path / "s")
    for e in range(3):
        leaves = [store.put(os.urandom(n)) for n in (10, 100, 5000)]
        inner = store.put_manifest(leaves, {"e": e, "n": [1, 2**40]})
        store.set_ref(f"ns/e{e}", store.put_manifest([inner, leaves[0]], {"top": True}))
    path = tmp_path / "orig.bundle"
    store.export_bundle(None, path)
    return path.read_bytes()


def mutate(rng: random.Random, data: bytes, index_offset: int) -> bytes:
    buf = bytearray(data)
    kind = rng.randrange(7)

    # Most mutations land in the metadata, where the parsers are.
    def spot() -> int:
        if rng.random() < 0.4:
            return rng.randrange(HEADER_LEN)
        if rng.random() < 0.8:
            return rng.randrange(index_offset, len(buf))
        return rng.randrange(len(buf))

    if kind == 0:
        for _ in range(rng.randint(1, 4)):
            buf[spot()] ^= 1 << rng.randrange(8)
    elif kind == 1:
        at = spot()
        buf[at : at + 8] = struct.pack(
            "<Q",
            rng.choice([0, 1, 2**63, 2**64 - 1, rng.randrange(2**64), len(buf), index_offset]),
        )
    elif kind == 2:
        del buf[rng.randrange(len(buf)) :]
    elif kind == 3:
        buf += os.urandom(rng.randint(1, 5000))
    elif kind == 4:
        at = spot()
        buf[at : at + rng.randint(1, 64)] = bytes([rng.choice([0, 0xFF])]) * rng.randint(1, 64)
    elif kind == 5:
        at, length = spot(), rng.randint(1, 100)
        del buf[at : at + length]
    else:
        at = spot()
        buf[at:at] = os.urandom(rng.randint(1, 100))
    if rng.random() < 0.5 and len(buf) >= HEADER_LEN + TRAILER_LEN and index_offset <= len(buf) - TRAILER_LEN:
        # Re-seal: make the trailer hash match again.
        tail = bytes(buf[index_offset : len(buf) - TRAILER_LEN])
        seal = blake3(bytes(buf[:HEADER_LEN]) + tail).digest()
        buf[len(buf) - TRAILER_LEN : len(buf) - 8] = seal
    return bytes(buf)


def exercise(path: Path) -> str:
    try:
        bundle = open_bundle(path)
    except StoreError:
        return "refused"
    try:
        bundle.verify(parallel=False)
        for name in bundle.refs():
            top = bundle.get_ref(name)
            assert top is not None
            for digest in bundle.closure(top):
                bundle.get(digest)
            bundle.get_manifest(top)
        return "opened"
    except StoreError:
        return "refused"
    finally:
        del bundle


def test_mutants_are_refused_with_typed_errors_or_read_correctly(
    tmp_path: Path,
) -> None:
    count = int(os.environ.get("PRECOMPILE_FUZZ_MUTANTS", "20000"))
    original = build(tmp_path)
    (index_offset,) = struct.unpack_from("<Q", original, 56)
    rng = random.Random(20)
    # Memory-backed when the machine has it: the fuzz tests parsers, not disks.
    scratch = Path(tempfile.mkdtemp(dir="/dev/shm")) if os.path.isdir("/dev/shm") else tmp_path
    path = scratch / "mutant.bundle"
    staging = scratch / "staging.bundle"
    outcomes = {"refused": 0, "opened": 0}
    start = time.monotonic()
    for _ in range(count):
        staging.write_bytes(mutate(rng, original, index_offset))
        # Replaced by rename, never rewritten: a mapping of the last mutant
        # may still be alive.
        os.replace(staging, path)
        outcomes[exercise(path)] += 1
    elapsed = time.monotonic() - start
    shutil.rmtree(scratch, ignore_errors=True)
    assert sum(outcomes.values()) == count >= 20_000 or "PRECOMPILE_FUZZ_MUTANTS" in os.environ
    assert elapsed < 60, f"{count} mutants took {elapsed:.1f} s"
    assert outcomes["refused"] > count // 2
    print(f"\n{count} mutants in {elapsed:.1f} s: {outcomes}")


@pytest.mark.parametrize("seed", range(3))
def test_the_original_always_opens(tmp_path: Path, seed: int) -> None:
    """The control: without mutation everything reads back."""
    (tmp_path / f"{seed}").mkdir()
    path = tmp_path / f"{seed}" / "b.bundle"
    path.write_bytes(build(tmp_path / f"{seed}"))
    assert exercise(path) == "opened"
