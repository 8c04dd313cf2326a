"""Store core benchmark: put throughput, get latency, multi-process ops/s.

    python benches/store_bench.py [--quick]

Prints markdown tables of medians, each against an anchor measured in the
same run: the `blake3` package hashing on one thread (its default), and
plain `write` + `fsync` of the same bytes to a file on the same filesystem.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import blake3 as blake3_pkg
from blake3 import blake3

import precompile
from precompile import Store, blake3_hex

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def timed(op: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    op()
    return time.perf_counter() - t0


def median_seconds(op: Callable[[], object], reps: int) -> float:
    """Median wall time of `op()` over `reps` runs."""
    return statistics.median(timed(op) for _ in range(reps))


def size_label(n: int) -> str:
    for unit, name in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
        if n >= unit:
            return f"{n // unit} {name}"
    return f"{n} B"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def put_throughput(root: Path, quick: bool) -> str:
    store = Store(root / "put")
    plain_dir = root / "plain"
    plain_dir.mkdir()
    rows = []
    for size, reps in ((4 * KiB, 300), (1 * MiB, 40), (256 * MiB, 7)):
        if quick:
            reps = max(3, reps // 10)
        base = os.urandom(min(size, MiB)) * max(1, size // MiB)
        store.put(base)
        # The contenders take turns within each repetition, in alternating
        # order, so a burst of load or writeback from elsewhere on the
        # machine hits them alike. Plain files are kept, like objects are.
        times: dict[str, list[float]] = {k: [] for k in ("put", "plain", "dedup", "core", "pkg")}
        # Every put stores new content; plain files get the same bytes.
        for i in range(reps):
            fresh = i.to_bytes(8, "little") + base[8:]  # content never stored before

            def write_fsync(fresh: bytes = fresh, i: int = i) -> None:
                with open(plain_dir / f"{size}-{i}", "wb") as f:
                    f.write(fresh)
                    f.flush()
                    os.fsync(f.fileno())

            def put(fresh: bytes = fresh) -> None:
                store.put(fresh)

            for name, op in [("plain", write_fsync), ("put", put)][:: 1 if i % 2 else -1]:
                times[name].append(timed(op))
            times["dedup"].append(timed(lambda: store.put(base)))
            del fresh
        # Hashing alone, in batches long enough to time (4 KiB: 2048 calls).
        batch = max(1, 8 * MiB // size)

        def core_hash() -> None:
            for _ in range(batch):
                blake3_hex(base)

        def pkg_hash() -> None:
            for _ in range(batch):
                blake3(base).digest()

        for _ in range(3 if quick else 15):
            times["core"].append(timed(core_hash) / batch)
            times["pkg"].append(timed(pkg_hash) / batch)
        for f in plain_dir.iterdir():
            f.unlink()
        t = {k: statistics.median(v) for k, v in times.items()}

        def mbs(seconds: float) -> str:
            return f"{size / seconds / 1e6:,.0f}"

        rows.append(
            [
                size_label(size),
                str(reps),
                mbs(t["put"]),
                mbs(t["plain"]),
                f"{t['plain'] / t['put']:.2f}",
                mbs(t["dedup"]),
                mbs(t["core"]),
                mbs(t["pkg"]),
                f"{t['pkg'] / t['core']:.2f}",
            ]
        )
    header = [
        "blob",
        "N",
        "put new MB/s",
        "write+fsync MB/s",
        "put / write",
        "put dedup MB/s",
        "core hash MB/s",
        "blake3 pkg 1-thread MB/s",
        "core / pkg",
    ]
    return table(header, rows)


def get_latency(root: Path, quick: bool) -> str:
    path = root / "get"
    writer = Store(path)
    sizes = [4 * KiB, 1 * MiB, 64 * MiB, 256 * MiB] + ([] if quick else [1 * GiB])
    digests = {}
    for size in sizes:
        digests[size] = writer.put(os.urandom(min(size, MiB)) * max(1, size // MiB))
    trusting, verifying = Store(path, verify=False), Store(path)
    rows = []
    for size in sizes:
        digest = digests[size]
        fast = median_seconds(lambda: trusting.get(digest), 200)
        reps = 200 if size <= MiB else (10 if size <= 64 * MiB else 5)
        checked = median_seconds(lambda: verifying.get(digest), reps)
        rows.append(
            [
                size_label(size),
                f"{fast * 1e6:,.1f}",
                f"{checked * 1e6:,.0f}",
                f"{size / checked / 1e6:,.0f}",
            ]
        )
    header = ["blob", "get verify=False (µs)", "get verify=True (µs)", "verify=True MB/s"]
    return table(header, rows)


def worker(root: str, seconds: float, seed: int) -> None:
    """One process of the ops/s run: 1 in 4 ops puts a new 1 KiB blob, the
    rest are verified gets of blobs this process stored."""
    store = Store(root)
    rng = random.Random(seed)
    blob = bytearray(os.urandom(1 * KiB))
    mine = [store.put(bytes(blob))]
    print("ready", flush=True)
    sys.stdin.readline()
    ops = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        if ops % 4 == 0:
            blob[:8] = rng.randbytes(8)
            mine.append(store.put(bytes(blob)))
        else:
            store.get(mine[rng.randrange(len(mine))])
        ops += 1
    print(ops, flush=True)


def ops_per_second(root: Path, quick: bool) -> str:
    seconds = 1.0 if quick else 2.0
    rows = []
    single = None
    for n in (1, 2, 8):
        path = root / f"ops{n}"
        Store(path)
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, "--worker", str(path), str(seconds), str(seed)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for seed in range(n)
        ]
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == "ready\n"
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        total = sum(int(p.communicate()[0]) for p in procs)
        rate = total / seconds
        single = single or rate
        rows.append([str(n), f"{rate:,.0f}", f"{rate / single:.2f}"])
    return table(["processes", "ops/s", "vs 1 process"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, no 1 GiB")
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker[0], float(args.worker[1]), int(args.worker[2]))
        return

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        root = Path(tmp)
        print(
            f"precompile {precompile.__version__}, blake3 package {blake3_pkg.__version__}, "
            f"Python {platform.python_version()}, {os.cpu_count()} cores ({cpu}), store in {root}, "
            f"load average {os.getloadavg()[0]:.2f}\n"
        )
        print("Put throughput (median of N; every put stores new content):\n")
        print(put_throughput(root, args.quick), "\n")
        print("Get latency (median; verify=False maps the file, verify=True also rehashes it):\n")
        print(get_latency(root, args.quick), "\n")
        print("Mixed small-blob ops/s (1 in 4 puts a new 1 KiB blob, 3 in 4 are verified gets):\n")
        print(ops_per_second(root, args.quick), "\n")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"total {time.perf_counter() - started:.0f} s; load average {load} (other work shares these cores)")


if __name__ == "__main__":
    main()
