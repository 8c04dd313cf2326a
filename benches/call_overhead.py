"""Steady-state cost of a call after a fresh host's warm start: eager, torch's DynamoCache and precompile, in one run.

    python benches/call_overhead.py [--models mlp,regional] [--calls 500] [--repeat 10]

A warm start that loads every graph can still cost on every later call: the
guards of the loaded variants run before each call, and a store that keeps
wrappers' variants apart may re-install them when calls alternate between
wrappers. For each model, in fresh processes:

- eager: the model without `torch.compile`;
- compiled: the cold process that compiled the model (torch.compile's own
  steady state, the anchor a loaded model should match);
- torch / precompile fresh: a new Inductor cache dir, only the store carried.

After the first call (not timed here; see warm_start.py), each process times
`--calls` calls `--repeat` times and reports the fastest round per call (as
`timeit` does: the rounds a noisy machine slowed say nothing of the code), and the
graphs its first call compiled. `regional` is alternating blocks of two
classes each compiled with `Module.compile()` (one wrapper per block, all of
one lineage); `mlp` is one wrapper.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from warm_start import _compiler_runs, _graphs_compiled, fresh_host_env  # noqa: E402


def child(args: argparse.Namespace) -> None:
    import models
    import torch

    if args.store != "eager":
        torch._dynamo.config.caching_precompile = True
    if args.store == "precompile":
        import precompile

        precompile.install(args.store_dir, save_on_exit=False)
    model, x = models.build(args.model, "cpu")
    if args.store != "eager":
        if isinstance(model, models.Regional):
            model.compile_blocks()
        else:
            model = torch.compile(model)
    with torch.no_grad():
        model(x)
        samples = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            for _ in range(args.calls):
                model(x)
            samples.append((time.perf_counter() - start) / args.calls)
    if args.phase == "cold" and args.store == "precompile":
        precompile.save()
    elif args.phase == "cold" and args.store == "torch":
        torch.compiler.save_cache_artifacts()
    from torch._dynamo.utils import counters

    out = {
        "per_call_us": min(samples) * 1e6,
        "counters": {k: dict(v) for k, v in counters.items() if k in ("inductor", "aot_autograd")},
    }
    Path(args.out).write_text(json.dumps(out))


def _run(store: str, phase: str, args: argparse.Namespace, work: Path, inductor: Path, store_dir: Path) -> dict:
    out = work / f"{store}-{phase}-{time.monotonic_ns()}.json"
    env = fresh_host_env(work, inductor)
    cmd = [sys.executable, __file__, "child", "--store", store, "--phase", phase, "--model", args.model_name]
    cmd += ["--store-dir", str(store_dir), "--out", str(out), "--calls", str(args.calls), "--repeat", str(args.repeat)]
    (work / "compiler.log").unlink(missing_ok=True)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        print(f"  {store}/{args.model_name}/{phase} crashed: {last}", file=sys.stderr)
        return {"crashed": last}
    result = json.loads(out.read_text())
    result["graphs"] = _graphs_compiled(result.pop("counters"))
    result["compiler_runs"] = _compiler_runs(work / "compiler.log")
    return result


def measure(args: argparse.Namespace, root: Path) -> dict[str, dict]:
    results = {}
    work = root / f"eager-{args.model_name}"
    work.mkdir(parents=True)
    results["eager"] = _run("eager", "fresh", args, work, work / "inductor", work / "none")
    for store in ("torch", "precompile"):
        work = root / f"{store}-{args.model_name}"
        work.mkdir(parents=True)
        inductor = work / "inductor"
        store_dir = work / "store" if store == "precompile" else inductor / "dynamo"
        cold = _run(store, "cold", args, work, inductor, store_dir)
        if store == "torch":
            results["compiled"] = cold
        fresh_inductor = work / "fresh"
        if store == "torch":
            # torch's entries live inside the Inductor cache dir: carry only them.
            if store_dir.exists():
                shutil.copytree(store_dir, fresh_inductor / "dynamo")
            store_dir = fresh_inductor / "dynamo"
        # A fresh host has none of the cold run's paths.
        if inductor.exists():
            inductor.rename(work / "inductor.hidden")
        results[store] = _run(store, "fresh", args, work, fresh_inductor, store_dir)
    return results


def _cell(result: dict, graphs: bool = True) -> str:
    if "crashed" in result:
        return "crash"
    text = f"{result['per_call_us']:.1f} µs"
    return f"{text} ({result['graphs']} graphs)" if graphs else text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    c = sub.add_parser("child")
    for name in ("--store", "--phase", "--model", "--store-dir", "--out"):
        c.add_argument(name, required=True)
    c.add_argument("--calls", type=int, required=True)
    c.add_argument("--repeat", type=int, required=True)
    ap.add_argument("--models", default="mlp,regional")
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    if args.cmd == "child":
        child(args)
        return
    import torch

    print(f"torch {torch.__version__}, CPU, {args.calls} calls x {args.repeat}, fastest round per call")
    print("| model | eager | compiled (cold process) | torch fresh host | precompile fresh host |")
    print("|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="call-overhead-") as tmp:
        for name in args.models.split(","):
            args.model_name = name
            r = measure(args, Path(tmp) / name)
            row = [_cell(r["eager"], graphs=False), _cell(r["compiled"], graphs=False), _cell(r["torch"])]
            print(f"| {name} | " + " | ".join([*row, _cell(r["precompile"])]) + " |", flush=True)


if __name__ == "__main__":
    main()
