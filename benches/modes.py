"""Compile modes on a fresh host: torch's DiskDynamoCache against precompile, per mode.

    python benches/modes.py [--device cpu|cuda] [--cases max_autotune,dynamic,...]

For each case of benches/mode_cases.py (a small transformer block compiled one way:
a `torch.compile` mode, dynamic shapes, fullgraph, a function, a method, inference
mode, autocast, a training step with its optimizer step) and each store, a cold
process compiles and saves, then a fresh process (a new Inductor and Triton cache
dir; only the store travels: torch's `dynamo/` dir, or precompile's store) runs the
same. It prints, per case, the fresh process's in-process time of compile plus the
case's calls (for precompile, `import precompile` and `install()` too, as
benches/warm_start.py counts them), the graphs it compiled (FX-graph plus
AOTAutograd cache misses) and the compiler runs, beside the cold process's time.
A process that crashes is reported as such.
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

STORES = ("torch", "precompile")


# ---------------------------------------------------------------- child side
def child(args: argparse.Namespace) -> None:
    import torch

    torch._dynamo.config.caching_precompile = True
    start = time.perf_counter()
    if args.store == "precompile":
        import precompile

        precompile.install(args.store_dir, save_on_exit=False)
    # The decorated-method case compiles its method when the module is
    # imported: the clock covers the import.
    import mode_cases

    mode_cases.CASES[args.case](args.device)
    if args.device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    if args.phase == "cold":
        if args.store == "precompile":
            precompile.save()
        else:
            torch.compiler.save_cache_artifacts()
    from torch._dynamo.utils import counters

    out = {
        "seconds": seconds,
        "counters": {k: dict(v) for k, v in counters.items() if k in ("inductor", "aot_autograd", "precompile")},
    }
    Path(args.out).write_text(json.dumps(out))


# --------------------------------------------------------------- parent side
def run_child(store: str, phase: str, case: str, device: str, work: Path, inductor: Path, store_dir: Path) -> dict:
    out = work / f"{store}-{case}-{phase}.json"
    env = fresh_host_env(work, inductor)
    cmd = [sys.executable, __file__, "child", "--store", store, "--phase", phase, "--case", case]
    cmd += ["--device", device, "--store-dir", str(store_dir), "--out", str(out)]
    (work / "compiler.log").unlink(missing_ok=True)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        print(f"  {store}/{case}/{phase} crashed: {last}", file=sys.stderr)
        return {"crashed": last}
    result = json.loads(out.read_text())
    result["compiler_runs"] = _compiler_runs(work / "compiler.log")
    return result


def measure(store: str, case: str, device: str, root: Path) -> dict:
    work = root / f"{store}-{case}"
    work.mkdir(parents=True)
    inductor = work / "cold"
    store_dir = work / "store" if store == "precompile" else inductor / "dynamo"
    cold = run_child(store, "cold", case, device, work, inductor, store_dir)
    fresh_inductor = work / "fresh"
    fresh_store = store_dir
    if store == "torch":
        # torch's entries live inside the Inductor cache dir: carry only them.
        fresh_store = fresh_inductor / "dynamo"
        if store_dir.exists():
            shutil.copytree(store_dir, fresh_store)
    fresh = run_child(store, "fresh", case, device, work, fresh_inductor, fresh_store)
    return {"cold": cold, "fresh": fresh}


def _cell(result: dict) -> tuple[str, str, str, str]:
    if "crashed" in result:
        return "crashed", "-", "-", "-"
    graphs = _graphs_compiled(result["counters"])
    # Launch configs Triton's coordinate descent benchmarked (max-autotune on a GPU).
    tuned = result["counters"].get("inductor", {}).get("coordesc_tuning_bench", 0)
    return f"{result['seconds']:.2f}", str(graphs), str(result["compiler_runs"]), str(tuned)


def print_table(results: dict[str, dict[str, dict]], device: str) -> None:
    print(
        f"\nFresh host, {device}: seconds of compile + the case's calls; graphs compiled; compiler runs;"
        " launch configs tuned"
    )
    header = (
        f"{'case':28} {'cold s':>8} | {'torch s':>8} {'graphs':>6} {'cc':>4} {'tuned':>5}"
        f" | {'precompile s':>12} {'graphs':>6} {'cc':>4} {'tuned':>5}"
    )
    print(header)
    print("-" * len(header))
    for case, by_store in results.items():
        cold = _cell(by_store["precompile"]["cold"])[0]
        t = _cell(by_store["torch"]["fresh"])
        p = _cell(by_store["precompile"]["fresh"])
        print(
            f"{case:28} {cold:>8} | {t[0]:>8} {t[1]:>6} {t[2]:>4} {t[3]:>5} | {p[0]:>12} {p[1]:>6} {p[2]:>4} {p[3]:>5}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    c = sub.add_parser("child")
    c.add_argument("--store", choices=STORES, required=True)
    c.add_argument("--phase", choices=("cold", "fresh"), required=True)
    c.add_argument("--case", required=True)
    c.add_argument("--device", required=True)
    c.add_argument("--store-dir", required=True)
    c.add_argument("--out", required=True)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--cases", default="", help="comma-separated cases (default: every case the device runs)")
    ap.add_argument("--json", default="", help="also write the results here")
    args = ap.parse_args()
    if args.cmd == "child":
        child(args)
        return
    import mode_cases

    cases = args.cases.split(",") if args.cases else mode_cases.available(args.device)
    unknown = sorted(set(cases) - set(mode_cases.CASES))
    if unknown:
        ap.error(f"no case called {', '.join(unknown)}; cases: {', '.join(mode_cases.CASES)}")
    results: dict[str, dict[str, dict]] = {}
    with tempfile.TemporaryDirectory(prefix="precompile-modes-") as tmp:
        for case in cases:
            results[case] = {}
            for store in STORES:
                print(f"  {case} / {store} ...", file=sys.stderr, flush=True)
                results[case][store] = measure(store, case, args.device, Path(tmp))
    print_table(results, args.device)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
