"""Warm start: torch's DiskDynamoCache against precompile, in one run.

    python benches/warm_start.py [--device cpu|cuda] [--models mlp,transformer,breaks] [--repeat 3]
    python benches/warm_start.py --models resnet18,gpt2,bert --no-shared   # corpus models

`--models` takes the built-in `mlp`, `transformer` and `breaks` and the names of
benches/corpus.py (torchvision and transformers models, each compiled and run
as a user would: several input shapes, or one training step). For those the
clock covers building the model, `torch.compile` and every call.

For each model and each store, in fresh processes, it times `torch.compile`
plus the first call, in-process (the cache lookup happens inside
`torch.compile`, the compile or load inside the call); for precompile the
clock also covers `import precompile` and `install()`, which import the torch
internals that torch's own load imports inside the first call:

- cold: empty caches, compile from scratch, then save;
- warm: every cache of the cold run still present;
- fresh machine: a new Inductor cache dir (and Triton cache dir), only the
  store travels (torch: its `dynamo/` dir; precompile: the store dir).

Eager PyTorch (no compile) runs the same first calls in fresh processes: the
floor a warm start is measured against. Each fresh run also reports the wall
time from spawning the process to its first output (interpreter, imports and
all), and precompile's own share of the first calls (`of which store`).
`--profile DIR` writes a cProfile summary (and the raw `.prof`) of every fresh first call.

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
def _record_precompile_entries(store: str) -> None:
    """Turn on Dynamo's precompile records, for the stores only: `torch._dynamo`
    is a lazy submodule, and touching its config would make eager's floor pay
    Dynamo's import (about 0.9 s on the 2-core CPU VM)."""
    if store != "eager":
        import torch

        torch._dynamo.config.caching_precompile = True


def child(args: argparse.Namespace) -> None:
    import torch

    sys.path.insert(0, str(HERE))
    import corpus
    import models

    _record_precompile_entries(args.store)
    # Eager PyTorch runs the same calls without compiling: the floor.
    compile_fn = (lambda m: m) if args.store == "eager" else torch.compile
    corpus.compile_fn = compile_fn
    corpus.device = args.device
    install_s = 0.0
    if args.store == "precompile":
        # install() imports the torch internals it adapts, which torch's own
        # load imports inside its first call: its time counts as first-call time.
        install_start = time.perf_counter()
        import precompile

        cache = precompile.install(args.store_dir, save_on_exit=False)
        install_s = time.perf_counter() - install_start
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
        from precompile import _torch

        _torch.swap_dynamo_cache(cache)
    out: dict = {}
    if args.model == "shared":
        sys.path.insert(0, args.work)
        mod = __import__(
            models.shared_kernel_module(8, args.work)
            if args.phase == "cold" or args.store == "eager"
            else "shared_blocks"
        )
        x = torch.randn(16, 32, device=args.device)
        w1 = torch.randn(32, 64, device=args.device)
        w2 = torch.randn(64, 32, device=args.device)
        # torch.compile() itself looks the function up in the cache and
        # installs what it finds, so the clock starts before it.
        start = _start_clock(args)
        for i in range(8):
            compile_fn(getattr(mod, f"block_{i}"))(x, w1, w2)
        if args.device == "cuda":
            torch.cuda.synchronize()
    elif args.model in corpus.MODELS:
        reason = corpus.missing_reason(args.model)  # imports the model's library
        if reason is not None:
            raise SystemExit(reason)
        # Building the model (and the imports it pulls in) is the same work
        # with or without a compiler: the clock covers compile and calls.
        calls = corpus.build(args.model)
        start = _start_clock(args)
        calls()
        if args.device == "cuda":
            torch.cuda.synchronize()
    else:
        if args.model == "breaks":
            sys.path.insert(0, args.work)
            name = models.breaks_module(24, args.work) if args.phase == "cold" or args.store == "eager" else "breaky_24"
            torch.manual_seed(0)
            model = __import__(name).Breaky().to(args.device)
            x = torch.randn(8, 16, 64, device=args.device)
        else:
            model, x = models.build(args.model, args.device)
        with torch.no_grad():
            start = _start_clock(args)
            compile_fn(model)(x)
            if args.device == "cuda":
                torch.cuda.synchronize()
    out["first_call_s"] = time.perf_counter() - start + install_s
    out["install_s"] = install_s
    # Wall time from the parent's spawn to the first output: interpreter and
    # torch import included, as a serving process pays it.
    out["process_to_output_s"] = time.time() - float(args.launched)
    # Whether the first output came before Dynamo was imported (eager's floor must not pay it).
    out["dynamo_imported"] = "torch._dynamo" in sys.modules
    _stop_clock(args)
    if args.store == "precompile":
        out["store_load_s"] = spent[0]
    if args.phase == "cold" and args.store != "eager":
        if args.store == "precompile":
            precompile.save()
        else:
            torch.compiler.save_cache_artifacts()
    if args.store == "precompile" and args.phase != "cold" and cache.store.refs("dynamo/"):
        # Store overhead for one entry: ref lookup + read + verify + map.
        from precompile.entries import fetch_entry

        names = cache.store.refs("dynamo/")
        samples = []
        for _ in range(50):
            t = time.perf_counter()
            fetch_entry(cache.store, cache.store.get_ref(names[0]))
            samples.append(time.perf_counter() - t)
        out["entry_overhead_ms"] = statistics.median(samples) * 1e3
    from torch._dynamo.utils import counters

    out["counters"] = {
        k: dict(v) for k, v in counters.items() if k in ("dynamo_cache", "inductor", "aot_autograd", "precompile")
    }
    Path(args.out).write_text(json.dumps(out))


_profiler = None


def _start_clock(args: argparse.Namespace) -> float:
    """Start the first-call clock, and the profiler when --profile asks."""
    global _profiler
    if args.profile:
        import cProfile

        _profiler = cProfile.Profile()
        _profiler.enable()
    return time.perf_counter()


def _stop_clock(args: argparse.Namespace) -> None:
    if _profiler is None:
        return
    import pstats

    _profiler.disable()
    name = f"{args.store}-{args.model}-{args.phase}-{os.getpid()}"
    Path(args.profile).mkdir(parents=True, exist_ok=True)
    with open(Path(args.profile) / f"{name}.txt", "w") as f:
        stats = pstats.Stats(_profiler, stream=f).sort_stats("cumulative")
        stats.print_stats(60)
        stats.sort_stats("tottime").print_stats(40)
    # The raw profile too, for pstats/snakeviz: the summary above is cut at 60 lines.
    _profiler.dump_stats(Path(args.profile) / f"{name}.prof")


# --------------------------------------------------------------- parent side
_COMPILERS = ("g++", "gcc", "c++", "cc", "clang", "clang++")


def fresh_host_env(work: Path, inductor: Path) -> dict[str, str]:
    """The environment of a fresh host's process: its own Inductor and Triton
    cache dirs under `inductor`, and the compiler spy of `work` first on PATH."""
    env = dict(os.environ)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(inductor)
    env["TRITON_CACHE_DIR"] = str(inductor / "triton")
    _compiler_spy(work / "bin", work / "compiler.log", env)
    env["PATH"] = f"{work / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.pop("CXX", None)
    return env


def _compiler_spy(bin_dir: Path, log: Path, env: dict[str, str]) -> None:
    """Wrappers for the C/C++ compilers in `bin_dir` that log each call; the
    compiler `CC` names (Triton builds its stubs with it) is wrapped too."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    wanted = {name: shutil.which(name) for name in _COMPILERS}
    if env.get("CC"):
        wanted["cc-from-env"] = shutil.which(env["CC"]) or env["CC"]
    for name, real in wanted.items():
        if real is not None and not (bin_dir / name).exists():
            (bin_dir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\nexec "{real}" "$@"\n')
            (bin_dir / name).chmod(0o755)
    if env.get("CC"):
        env["CC"] = str(bin_dir / "cc-from-env")


def _compiler_runs(log: Path) -> int:
    # Version queries (`g++ -v`, `--version`) fingerprint cache keys; they compile nothing.
    if not log.exists():
        return 0
    return sum(1 for line in log.read_text().splitlines() if line.split()[1:] not in (["-v"], ["--version"]))


def run_child(
    store: str, phase: str, model: str, device: str, work: Path, inductor: Path, store_dir: Path, profile: str = ""
) -> dict:
    out = work / f"{store}-{model}-{phase}-{time.monotonic_ns()}.json"
    env = fresh_host_env(work, inductor)
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
        "--profile",
        profile,
        "--launched",
    ]
    (work / "compiler.log").unlink(missing_ok=True)
    proc = subprocess.run([*cmd, repr(time.time())], env=env, capture_output=True, text=True)
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


def measure(store: str, model: str, device: str, root: Path, repeat: int, profile: str = "") -> dict:
    work = root / f"{store}-{model}"
    work.mkdir(parents=True)
    inductor = work / "inductor"
    if store == "eager":
        # No store and nothing to warm: only first calls in fresh processes.
        runs = [run_child(store, "fresh", model, device, work, work / f"fresh{i}", work) for i in range(repeat)]
        first = _median(runs, "first_call_s")
        return {
            "fresh": first,
            "fresh_to_output": _median(runs, "process_to_output_s"),
            "fresh_compiler_runs": runs[-1].get("compiler_runs"),
            "dynamo_imported": any(r.get("dynamo_imported", False) for r in runs),
        }
    store_dir = work / "store" if store == "precompile" else inductor / "dynamo"
    cold = run_child(store, "cold", model, device, work, inductor, store_dir)
    warm = [run_child(store, "warm", model, device, work, inductor, store_dir) for _ in range(repeat)]
    if inductor.exists():
        # A stored object may name a file under the cold run's dir (a kernel's
        # source, its autotuning result beside it): a fresh host has no such path.
        inductor = inductor.rename(work / "inductor.hidden")
        if store == "torch":
            store_dir = inductor / "dynamo"
    fresh = []
    for i in range(repeat):
        fresh_inductor = work / f"fresh{i}"
        fresh_store = store_dir
        if store == "torch":
            # torch's entries live inside the Inductor cache dir: carry only them.
            fresh_store = fresh_inductor / "dynamo"
            if store_dir.exists():  # absent when the cold run crashed
                shutil.copytree(store_dir, fresh_store)
        fresh.append(run_child(store, "fresh", model, device, work, fresh_inductor, fresh_store, profile))
    return {
        "cold": _median([cold], "first_call_s"),
        "warm": _median(warm, "first_call_s"),
        "fresh": _median(fresh, "first_call_s"),
        "fresh_to_output": _median(fresh, "process_to_output_s"),
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
    for name in ("--store", "--phase", "--model", "--device", "--work", "--store-dir", "--out", "--launched"):
        c.add_argument(name, required=True)
    c.add_argument("--profile", default="")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--models", default="mlp,transformer")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--no-shared", action="store_true", help="skip the K=8 shared-kernel case")
    ap.add_argument("--profile", default="", help="write a cProfile summary of each fresh-machine first call here")
    args = ap.parse_args()
    if args.cmd == "child":
        child(args)
        return
    _byte_compile_precompile()
    root = Path(tempfile.mkdtemp(prefix="precompile-warm-"))
    results: dict = {}
    try:
        for model in _models(args):
            for store in ("eager", "torch", "precompile"):
                results[(model, store)] = measure(store, model, args.device, root, args.repeat, args.profile)
                print(f"  measured {model} / {store}", file=sys.stderr)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_table(results, args)
    if args.json:
        Path(args.json).write_text(json.dumps({f"{m}/{s}": v for (m, s), v in results.items()}, indent=1))


def _byte_compile_precompile() -> None:
    """Write precompile's bytecode, as pip does when it installs the wheel.

    torch's modules were byte-compiled when torch was installed. Run from a
    source tree (`PYTHONPATH=python`) with `PYTHONDONTWRITEBYTECODE` set,
    every fresh process would otherwise compile precompile's own sources
    inside its clock (about 0.25 s on the 2-core VM).
    """
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("precompile")
    if spec is not None and spec.submodule_search_locations:
        for directory in spec.submodule_search_locations:
            compileall.compile_dir(directory, quiet=1)


def _models(args: argparse.Namespace) -> list[str]:
    return [*args.models.split(","), *([] if args.no_shared else ["shared"])]


def print_table(results: dict, args: argparse.Namespace) -> None:
    print(f"\nwarm start, device={args.device}, median of {args.repeat} fresh processes (first calls, in-process)")
    print(
        f"{'model':<20}{'metric':<26}{'eager':>10}{'torch':>12}{'precompile':>12}{'torch/ours':>12}{'ours/eager':>12}"
    )
    rows = [
        ("cold compile s", "cold"),
        ("warm (all caches) s", "warm"),
        ("fresh machine s", "fresh"),
        ("  process start->output s", "fresh_to_output"),
        ("bytes on disk", "bytes"),
    ]

    def cell(v: object, fmt: str, width: int = 12) -> str:
        if v is None:
            return f"{'crash':>{width}}"
        return fmt.format(v).rjust(width)

    for model in _models(args):
        e, t, p = results[(model, "eager")], results[(model, "torch")], results[(model, "precompile")]
        label = model if model != "shared" else "K=8 shared"
        for title, key in rows:
            fmt = "{:.0f}" if key == "bytes" else "{:.3f}"
            ratio = f"{t[key] / p[key]:>11.2f}x" if t[key] is not None and p[key] else f"{'-':>12}"
            eager = e.get(key, "-") if key in e else "-"
            floor = f"{p[key] / e[key]:>11.2f}x" if key in e and e[key] and p[key] is not None else f"{'-':>12}"
            eager_cell = cell(eager, fmt, 10) if eager != "-" else f"{'-':>10}"
            print(f"{label:<20}{title:<26}" + eager_cell + cell(t[key], fmt) + cell(p[key], fmt) + ratio + floor)
        print(f"{label:<20}{'  of which store s':<26}{'':>10}{'':>12}" + cell(p["fresh_store_load_s"], "{:.3f}"))
        for title, key in (
            ("fresh graphs compiled", "fresh_graphs_compiled"),
            ("fresh compiler runs", "fresh_compiler_runs"),
        ):
            eager_cell = cell(e[key], "{}", 10) if key in e else f"{'-':>10}"
            print(f"{label:<20}{title:<26}" + eager_cell + cell(t[key], "{}") + cell(p[key], "{}"))
        if model != "shared":
            print(f"{label:<20}{'store overhead ms':<26}{'':>10}{'':>12}" + cell(p["overhead_ms"], "{:.3f}"))
        if e.get("dynamo_imported"):
            # The model's own code imported Dynamo (a graph break call, a library):
            # the floor includes that import, so ours/eager reads low.
            print(f"{label:<20}note: eager imported torch._dynamo before its first output")
    print()


if __name__ == "__main__":
    main()
