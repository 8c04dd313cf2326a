"""What checking remote ref signatures costs a fresh host's load.

    python benches/trust_bench.py [--entries 16] [--repeat 7] [--json FILE]

It starts its own redis-server on a loopback port, writes `--entries`
synthetic entries shaped like compiled ones (an entry manifest, two backend
manifests, a dozen blobs from 200 B to 2 MiB, one blob shared by all), and
pushes them signed. A fresh host is an empty local store behind a
`RemoteLayer`: it reads every ref, brings each closure over (every blob
hashed) and sets the local ref, as `install(remote=...)` does on a warm
start. Side by side in one run, alternating so that load and caches hit both
alike: the host trusting the signing key (one ed25519 verification per ref)
and the host that opted into unsigned entries (`allow_unsigned`, no check).
It prints the median time per load, the overhead, and the cost of one ref
check on its own.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _blob(tag: str, size: int) -> bytes:
    seed = hashlib.sha256(tag.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def _entries(store: Any, count: int) -> list[str]:
    rng = random.Random(0)
    shared = store.put(_blob("shared", 256 << 10))
    names = []
    for i in range(count):
        backends = []
        for b in range(2):
            sizes = [rng.choice([200, 4_000, 60_000, 500_000, 2_000_000]) for _ in range(6)]
            leaves = [store.put(_blob(f"{i}-{b}-{j}", n)) for j, n in enumerate(sizes)]
            backends.append(store.put_manifest([*leaves, shared], {"kind": "backend", "n": b}))
        name = f"dynamo/bench-env/entry-{i:04d}"
        store.set_ref(name, store.put_manifest(backends, {"kind": "entry", "key": name}))
        names.append(name)
    return names


def measure(args: argparse.Namespace, root: Path, url: str) -> dict[str, Any]:
    import precompile
    from precompile.remote import Remote, RemoteLayer, push
    from precompile.remote.trust import RefValue, TrustPolicy

    key = str(root / "fleet.key")
    public = precompile.keygen(key)
    src = precompile.Store(str(root / "build"))
    names = _entries(src, args.entries)
    push(src, Remote(url), names, signing_key=key)
    closure_bytes = src.usage().reachable_bytes
    policies = {
        "signed (trusted_keys)": TrustPolicy.resolve([public]),
        "unsigned (allow_unsigned)": TrustPolicy.resolve(None, allow_unsigned=True),
    }
    times: dict[str, list[float]] = {label: [] for label in policies}
    for rep in range(args.repeat):
        for label, policy in policies.items():
            dst = precompile.Store(str(root / f"fresh-{rep}-{len(times[label])}-{hash(label) & 0xFFFF}"))
            layer = RemoteLayer(Remote(url), dst, trust=policy)
            start = time.perf_counter()
            got = [layer.get_ref(n) for n in names]
            times[label].append(time.perf_counter() - start)
            assert all(d is not None for d in got), label
            assert layer.remote.stats()["untrusted"] == 0
    # One ref check on its own: parse the value and verify the signature.
    value = Remote(url).get_ref_value(names[0])
    assert value is not None
    policy = policies["signed (trusted_keys)"]
    n = 2000
    start = time.perf_counter()
    for _ in range(n):
        assert policy.refusal(names[0], RefValue(value.digest, value.signer, value.signature)) is None
    per_check = (time.perf_counter() - start) / n
    return {
        "entries": args.entries,
        "closure_bytes": closure_bytes,
        "repeat": args.repeat,
        "load_s": {label: statistics.median(t) for label, t in times.items()},
        "load_s_all": times,
        "ref_check_us": per_check * 1e6,
    }


def print_table(res: dict[str, Any]) -> None:
    signed, unsigned = (res["load_s"][k] for k in ("signed (trusted_keys)", "unsigned (allow_unsigned)"))
    print(
        f"fresh-host load of {res['entries']} entries ({res['closure_bytes'] / 2**20:.1f} MiB) "
        f"from a loopback Redis, median of {res['repeat']}"
    )
    print(f"{'host':<28}{'load (s)':>10}{'per entry (ms)':>16}")
    for label, t in res["load_s"].items():
        print(f"{label:<28}{t:>10.3f}{t / res['entries'] * 1e3:>16.2f}")
    print(f"overhead of signature checking: {(signed / unsigned - 1) * 100:+.1f}%")
    print(f"one ref check (parse + ed25519 verify): {res['ref_check_us']:.1f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    from fleet_bench import _start_redis

    with tempfile.TemporaryDirectory(prefix="trust-bench-") as tmp:
        root = Path(tmp)
        proc, port = _start_redis(root)
        try:
            res = measure(args, root, f"redis://127.0.0.1:{port}/0")
        finally:
            proc.terminate()
            proc.wait()
    print_table(res)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
