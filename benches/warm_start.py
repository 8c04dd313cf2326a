"""Warm start: torch's DiskDynamoCache against precompile, in one run.

    python benches/warm_start.py [--device cpu|cuda] [--models mlp,transformer,breaks] [--repeat 3]
    python benches/warm_start.py --models resnet18,gpt2,bert --no-shared   # corpus models

`--models` takes the built-in `mlp`, `transformer` and `breaks` and the names of
benches/corpus.py (torchvision and transformers models, each compiled and run
as a user would: several input shapes, or one training step). For those the
clock covers building the model, `torch.compile` and every call.

For each model and each store, in fresh processes, it times `torch.compile`
plus the first call, in-process (the cache lookup happens inside
`torch.compile`, the compile or load inside the call):

- cold: empty caches, compile from scratch, then save;
- warm: every cache of the cold run still present;
- fresh machine: a new Inductor cache dir (and Triton cache dir), only the
  store travels (torch: its `dynamo/` dir; precompile: the store dir).

It also reports bytes on disk for one model and for K=8 functions that share
kernels, and precompile's per-entry overhead (ref lookup + verify + map).
`breaks` is 24 identical blocks with a graph break after each (24 frames,
24 equal graphs). A process that crashes is reported as such.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _du(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except FileNotFoundError:
                pass
    return total


# ---------------------------------------------------------------- child side
def child(args: argparse.Namespace) -> None:
    import torch

    sys.path.insert(0, str(HERE))
    import corpus
    import models

    torch._dynamo.config.caching_precompile = True
    if args.store == "precompile":
        import precompile

        cache = precompile.install(args.store_dir, save_on_exit=False)
        # Time spent in the store's own lookup, verify and unpickle.
        load = cache.load
        spent = [0.0]

        def timed_load(fn):  # type: ignore[no-untyped-def]
            t = time.perf_counter()
            try:
                return load(fn)
            finally:
                spent[0] += time.perf_counter() - t

        cache.load = timed_load  # type: ignore[method-assign]
        # torch's DynamoCache serves through the cache's methods as bound at
        # install(): bind the timed one.
        from precompile import _torch_compat

        _torch_compat.swap_dynamo_cache(cache)
    out: dict = {}
    if args.model == "shared":
        sys.path.insert(0, args.work)
        mod = __import__(models.shared_kernel_module(8, args.work) if args.phase == "cold" else "shared_blocks")
        x = torch.randn(16, 32, device=args.device)
        w1 = torch.randn(32, 64, device=args.device)
        w2 = torch.randn(64, 32, device=args.device)
        # torch.compile() itself looks the function up in the cache and
        # installs what it finds, so the clock starts before it.
        start = time.perf_counter()
        for i in range(8):
            torch.compile(getattr(mod, f"block_{i}"))(x, w1, w2)
        if args.device == "cuda":
            torch.cuda.synchronize()
    elif args.model in corpus.MODELS:
        reason = corpus.missing_reason(args.model)  # imports the model's library
        if reason is not None:
            raise SystemExit(reason)
        start = time.perf_counter()
        corpus.run(args.model)
    else:
        if args.model == "breaks":
            sys.path.insert(0, args.work)
            name = models.breaks_module(24, args.work) if args.phase == "cold" else "breaky_24"
            torch.manual_seed(0)
            model = __import__(name).Breaky().to(args.device)
            x = torch.randn(8, 16, 64, device=args.device)
        else:
            model, x = models.build(args.model, args.device)
        with torch.no_grad():
            start = time.perf_counter()
            torch.compile(model)(x)
            if args.device == "cuda":
                torch.cuda.synchronize()
    out["first_call_s"] = time.perf_counter() - start
    if args.store == "precompile":
        out["store_load_s"] = spent[0]
    if args.phase == "cold":
        if args.store == "precompile":
            precompile.save()
        else:
            torch.compiler.save_cache_artifacts()
    if args.store == "precompile" and args.phase != "cold":
        # Store overhead for one entry: ref lookup + read + verify + map.
        from precompile.entries import fetch_entry, ref_name

        keys = [k.removeprefix("dynamo/") for k in cache.store.refs("dynamo/")]
        samples = []
        for _ in range(50):
            t = time.perf_counter()
            fetch_entry(cache.store, cache.store.get_ref(ref_name(keys[0])))
            samples.append(time.perf_counter() - t)
        out["entry_overhead_ms"] = statistics.median(samples) * 1e3
    from torch._dynamo.utils import counters

    out["counters"] = {
        k: dict(v) for k, v in counters.items() if k in ("dynamo_cache", "inductor", "aot_autograd", "precompile")
    }
    Path(args.out).write_text(json.dumps(out))


# --------------------------------------------------------------- parent side
_COMPILERS = ("g++", "gcc", "c++", "cc", "clang", "clang++")


def _compiler_spy(bin_dir: Path, log: Path) -> None:
    """Wrappers for the C/C++ compilers in `bin_dir` that log each call."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in _COMPILERS:
        real = shutil.which(name)
        if real is not None and not (bin_dir / name).exists():
            (bin_dir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\nexec "{real}" "$@"\n')
            (bin_dir / name).chmod(0o755)


def _compiler_runs(log: Path) -> int:
    # Version queries (`g++ -v`, `--version`) fingerprint cache keys; they compile nothing.
    if not log.exists():
        return 0
    return sum(1 for line in log.read_text().splitlines() if line.split()[1:] not in (["-v"], ["--version"]))


def run_child(store: str, phase: str, model: str, device: str, work: Path, inductor: Path, store_dir: Path) -> dict:
    out = work / f"{store}-{model}-{phase}-{time.monotonic_ns()}.json"
    env = dict(os.environ)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(inductor)
    env["TRITON_CACHE_DIR"] = str(inductor / "triton")
    _compiler_spy(work / "bin", work / "compiler.log")
    env["PATH"] = f"{work / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.pop("CXX", None)
    cmd = [
        sys.executable,
        __file__,
        "child",
        "--store",
        store,
        "--phase",
        phase,
        "--model",
        model,
        "--device",
        device,
        "--work",
        str(work),
        "--store-dir",
        str(store_dir),
        "--out",
        str(out),
    ]
    (work / "compiler.log").unlink(missing_ok=True)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        print(f"  {store}/{model}/{phase} crashed: {last}", file=sys.stderr)
        return {"crashed": last}
    result = json.loads(out.read_text())
    result["compiler_runs"] = _compiler_runs(work / "compiler.log")
    return result


def _median(runs: list[dict], key: str) -> float | None:
    """The median of `key`, or None when any run crashed."""
    if any("crashed" in r for r in runs):
        return None
    return statistics.median(r.get(key, float("nan")) for r in runs)


def measure(store: str, model: str, device: str, root: Path, repeat: int) -> dict:
    work = root / f"{store}-{model}"
    work.mkdir(parents=True)
    inductor = work / "inductor"
    store_dir = work / "store" if store == "precompile" else inductor / "dynamo"
    cold = run_child(store, "cold", model, device, work, inductor, store_dir)
    warm = [run_child(store, "warm", model, device, work, inductor, store_dir) for _ in range(repeat)]
    fresh = []
    for i in range(repeat):
        fresh_inductor = work / f"fresh{i}"
        fresh_store = store_dir
        if store == "torch":
            # torch's entries live inside the Inductor cache dir: carry only them.
            fresh_store = fresh_inductor / "dynamo"
            shutil.copytree(store_dir, fresh_store)
        fresh.append(run_child(store, "fresh", model, device, work, fresh_inductor, fresh_store))
    return {
        "cold": _median([cold], "first_call_s"),
        "warm": _median(warm, "first_call_s"),
        "fresh": _median(fresh, "first_call_s"),
        "bytes": _du(store_dir),
        "overhead_ms": _median(warm, "entry_overhead_ms"),
        "fresh_store_load_s": _median(fresh, "store_load_s"),
        "fresh_counters": fresh[-1].get("counters", {}),
        "fresh_compiler_runs": fresh[-1].get("compiler_runs"),
        "fresh_graphs_compiled": _graphs_compiled(fresh[-1].get("counters", {})),
        "cold_graphs_compiled": _graphs_compiled(cold.get("counters", {})),
    }


def _graphs_compiled(counters: dict) -> int:
    """Graphs traced and compiled: FX-graph plus AOTAutograd cache misses."""
    inductor, aot = counters.get("inductor", {}), counters.get("aot_autograd", {})
    return int(inductor.get("fxgraph_cache_miss", 0)) + int(aot.get("autograd_cache_miss", 0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    c = sub.add_parser("child")
    for name in ("--store", "--phase", "--model", "--device", "--work", "--store-dir", "--out"):
        c.add_argument(name, required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--models", default="mlp,transformer")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--no-shared", action="store_true", help="skip the K=8 shared-kernel case")
    args = ap.parse_args()
    if args.cmd == "child":
        child(args)
        return
    root = Path(tempfile.mkdtemp(prefix="precompile-warm-"))
    results: dict = {}
    try:
        for model in _models(args):
            for store in ("torch", "precompile"):
                repeat = args.repeat if model != "shared" else 1
                results[(model, store)] = measure(store, model, args.device, root, repeat)
                print(f"  measured {model} / {store}", file=sys.stderr)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_table(results, args)
    if args.json:
        Path(args.json).write_text(json.dumps({f"{m}/{s}": v for (m, s), v in results.items()}, indent=1))


def _models(args: argparse.Namespace) -> list[str]:
    return [*args.models.split(","), *([] if args.no_shared else ["shared"])]


def print_table(results: dict, args: argparse.Namespace) -> None:
    print(f"\nwarm start, device={args.device}, median of {args.repeat} fresh processes (first call, in-process)")
    print(f"{'model':<20}{'metric':<22}{'torch':>12}{'precompile':>12}{'torch/ours':>12}")
    rows = [
        ("cold compile s", "cold"),
        ("warm (all caches) s", "warm"),
        ("fresh machine s", "fresh"),
        ("bytes on disk", "bytes"),
    ]

    def cell(v: object, fmt: str) -> str:
        return fmt.format(v) if v is not None else f"{'crash':>12}"

    for model in _models(args):
        t, p = results[(model, "torch")], results[(model, "precompile")]
        label = model if model != "shared" else "K=8 shared"
        for title, key in rows:
            fmt = "{:>12.0f}" if key == "bytes" else "{:>12.3f}"
            ratio = f"{t[key] / p[key]:>11.1f}x" if t[key] is not None and p[key] else f"{'-':>12}"
            print(f"{label:<20}{title:<22}" + cell(t[key], fmt) + cell(p[key], fmt) + ratio)
        print(f"{label:<20}{'  of which store s':<22}{'':>12}" + cell(p["fresh_store_load_s"], "{:>12.3f}"))
        for title, key in (
            ("fresh graphs compiled", "fresh_graphs_compiled"),
            ("fresh compiler runs", "fresh_compiler_runs"),
        ):
            print(f"{label:<20}{title:<22}" + cell(t[key], "{:>12}") + cell(p[key], "{:>12}"))
        if model != "shared":
            print(f"{label:<20}{'store overhead ms':<22}{'':>12}" + cell(p["overhead_ms"], "{:>12.3f}"))
    print()


if __name__ == "__main__":
    main()
