"""Warm start of large models: Llama 1B and 8B shapes and 24 graph breaks.

    python benches/large_models.py --device cuda --model 1b,8b,breaks24 [--seqs 128,512,2048] [--json FILE]
    python benches/large_models.py --small --model 1b,breaks24 [--json FILE]     # CPU, a few minutes

Models (random weights, bf16, no model hub):

- `1b`: transformers `LlamaForCausalLM`, 16 layers, hidden 2048, intermediate
  8192, 32 heads / 8 KV heads, vocab 32000;
- `8b`: 32 layers, hidden 4096, intermediate 14336, 32 / 8 heads, vocab 128256;
  built on the device under `no_init_weights` and filled with `normal_` there;
- `breaks24`: 24 identical blocks with a graph break after each
  (benches/models.py `breaks_module`), input (8, seq, 64).

`--small` shrinks the Llamas to 2 layers (hidden 256 / 512) and the sequence
lengths to 16, 32, 64, so that it runs on a 2-core CPU. One compiled model
is called once per sequence length, dynamic shapes as torch decides
(the second length recompiles with a dynamic length, the third reuses it).

Per model, each cell a fresh process: eager PyTorch (the floor), then for
torch's `DiskDynamoCache` and for precompile a cold compile that fills the
store and a fresh host (new `TORCHINDUCTOR_CACHE_DIR` and `TRITON_CACHE_DIR`;
only the store travels: torch's `dynamo/` dir, precompile's store dir). It
reports, for the fresh host: the first calls (`torch.compile` plus one call
per length, synchronized; precompile's also cover `import precompile` and
`install()`), the compile phase (those minus eager's first calls of the same
shapes), graphs compiled (FX-graph and AOTAutograd cache misses), compiler
runs (a spy on PATH), kernels loaded and kernels per second of compile phase,
the time per kernel inside the load (mean, median and the first load)
against loading the same binaries raw (GPU: Triton's `load_binary`, i.e.
cuModuleLoadData, first loads in a fresh process whose CUDA context is up,
and repeats; CPU: `dlopen` of a copy of each kernel library), and the
store's bytes.

`--stores precompile` leaves torch's cells out (shown as `-`); `--profile DIR`
samples the fresh host's timed window (benches/sampler.py) (`--profile-stores` picks
whose); `--keep-store DIR` keeps precompile's filled store and `--reuse-store
DIR` starts a later run's fresh host from it; `--small --layers 16` keeps a full model's layer count at small widths.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import warm_start  # noqa: E402  (the compiler spy, byte compile, du, graph counts)
from sampler import Sampler  # noqa: E402

LLAMAS = {
    "1b": {
        "num_hidden_layers": 16,
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
    },
    "8b": {
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
    },
}
SMALL = {
    "1b": {"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 1024, "num_attention_heads": 8},
    "8b": {"num_hidden_layers": 2, "hidden_size": 512, "intermediate_size": 1792, "num_attention_heads": 8},
}


# ---------------------------------------------------------------- child side
def _no_init() -> contextlib.AbstractContextManager[Any]:
    """transformers' context that skips weight initialisation (moved between releases)."""
    for module in ("transformers.initialization", "transformers.modeling_utils"):
        try:
            return __import__(module, fromlist=["no_init_weights"]).no_init_weights()  # type: ignore[no-any-return]
        except (ImportError, AttributeError):
            continue
    return contextlib.nullcontext()


def build(name: str, device: str, small: bool, work: str) -> tuple[Any, list[Any]]:
    """The model and one input per sequence length (not timed)."""
    import torch

    torch.manual_seed(0)
    seqs = _seqs_of(small)
    if name == "breaks24":
        import models

        sys.path.insert(0, work)
        model = __import__(models.breaks_module(24, work) if not Path(work, "breaky_24.py").exists() else "breaky_24")
        net = model.Breaky().to(device=device, dtype=torch.bfloat16)
        return net, [torch.randn(8, s, 64, device=device, dtype=torch.bfloat16) for s in seqs]
    from transformers import LlamaConfig, LlamaForCausalLM

    shape = {**LLAMAS[name], **(SMALL[name] if small else {})}
    if os.environ.get("LARGE_MODELS_LAYERS"):
        shape["num_hidden_layers"] = int(os.environ["LARGE_MODELS_LAYERS"])
    config = LlamaConfig(**shape, max_position_embeddings=4096)
    torch.set_default_dtype(torch.bfloat16)
    # Made on the device, uninitialised, then filled there: an 8B model built
    # on the host and initialised layer by layer takes minutes.
    with torch.device(device), _no_init():
        net = LlamaForCausalLM(config)
    torch.set_default_dtype(torch.float32)
    with torch.no_grad():
        for p in net.parameters():
            p.normal_(0.0, 0.02)
    net.eval()
    return net, [torch.randint(0, shape["vocab_size"], (1, s), device=device) for s in seqs]


def _seqs_of(small: bool) -> list[int]:
    return [int(s) for s in os.environ.get("LARGE_MODELS_SEQS", "16,32,64" if small else "128,512,2048").split(",")]


def child(args: argparse.Namespace) -> None:
    import kernel_loads
    import torch

    if args.store != "eager":
        # Only when compiling: touching `torch._dynamo` imports it, which eager's floor must not pay.
        torch._dynamo.config.caching_precompile = True
    gpu = kernel_loads.GpuKernelLog() if args.device == "cuda" else None
    install_s = 0.0
    sampler = _sampler(args)
    if args.store == "precompile":
        # install() imports the torch internals torch's own load imports inside the first call.
        with sampler:
            start = time.perf_counter()
            import precompile

            precompile.install(args.store_dir, save_on_exit=False)
            install_s = time.perf_counter() - start
    net, inputs = build(args.model, args.device, args.small, args.work)
    inductor = os.environ["TORCHINDUCTOR_CACHE_DIR"]
    libraries_before = kernel_loads.mapped_libraries(inductor)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    calls = []
    with torch.no_grad(), sampler:  # the timed window only: not building the model
        start = time.perf_counter()
        fn = net if args.store == "eager" else torch.compile(net)
        wrap_s = time.perf_counter() - start
        for x in inputs:
            t = time.perf_counter()
            fn(x) if args.model == "breaks24" else fn(input_ids=x, use_cache=False)
            sync()
            calls.append(time.perf_counter() - t)
        first = time.perf_counter() - start + install_s
    if isinstance(sampler, Sampler):
        Path(args.profile).mkdir(parents=True, exist_ok=True)
        sampler.write(Path(args.profile) / f"{args.store}-{args.model}-{args.phase}")
    out: dict[str, Any] = {
        "first_call_s": first,
        "calls_s": calls,
        "install_s": install_s,
        "wrap_s": wrap_s,
        "process_to_output_s": time.time() - float(args.launched),
    }
    if gpu is not None:
        out["kernels"] = len(gpu.binaries)
        ours, raw = gpu.summary(), kernel_loads.raw_gpu_loads(gpu.binaries)
        out["load_per_kernel_s"] = ours["per_kernel_s"]
        out["load_median_per_kernel_s"] = ours["median_s"]
        out["load_first_per_kernel_s"] = ours["first_s"]
        out["raw_per_kernel_s"] = raw["per_kernel_s"]
        out["raw_median_per_kernel_s"] = raw["median_s"]
        out["raw_first_per_kernel_s"] = raw["first_s"]
        out["raw_repeat_per_kernel_s"] = raw["repeat_per_kernel_s"]
    else:
        libraries = kernel_loads.mapped_libraries(inductor) - libraries_before
        out["kernels"] = len(libraries)
        out["load_per_kernel_s"] = None
        out["raw_per_kernel_s"] = kernel_loads.raw_cpu_loads(libraries)
    if args.phase == "cold" and args.store == "precompile":
        precompile.save()
    elif args.phase == "cold" and args.store == "torch":
        torch.compiler.save_cache_artifacts()
    from torch._dynamo.utils import counters

    out["counters"] = {k: dict(v) for k, v in counters.items() if k in ("dynamo_cache", "inductor", "aot_autograd")}
    Path(args.out).write_text(json.dumps(out))


def _sampler(args: argparse.Namespace) -> contextlib.AbstractContextManager[Any]:
    """A sampler of the timed window when --profile asks for this cell (fresh hosts only)."""
    if not args.profile or args.phase != "fresh" or args.store not in args.profile_stores.split(","):
        return contextlib.nullcontext()
    return Sampler()


# --------------------------------------------------------------- parent side
def run_child(args: argparse.Namespace, store: str, phase: str, model: str, inductor: Path, store_dir: Path) -> dict:
    work = Path(args.root)
    out = work / f"{store}-{model}-{phase}-{time.monotonic_ns()}.json"
    env = warm_start.fresh_host_env(work, inductor)
    env["LARGE_MODELS_SEQS"] = args.seqs or ",".join(map(str, _seqs_of(args.small)))
    if args.layers:
        env["LARGE_MODELS_LAYERS"] = str(args.layers)
    cmd = [sys.executable, __file__, "child", "--store", store, "--phase", phase, "--model", model]
    cmd += ["--device", args.device, "--work", str(work), "--store-dir", str(store_dir), "--out", str(out)]
    cmd += ["--small"] if args.small else []
    cmd += ["--profile", args.profile, "--profile-stores", args.profile_stores] if args.profile else []
    (work / "compiler.log").unlink(missing_ok=True)
    proc = subprocess.run([*cmd, "--launched", repr(time.time())], env=env, capture_output=True, text=True)
    print(f"  {model} / {store} / {phase}", file=sys.stderr)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        print(f"  {store}/{model}/{phase} crashed: {last}", file=sys.stderr)
        return {"crashed": last}
    result: dict[str, Any] = json.loads(out.read_text())
    result["compiler_runs"] = warm_start._compiler_runs(work / "compiler.log")
    result["graphs_compiled"] = warm_start._graphs_compiled(result["counters"])
    return result


def measure(args: argparse.Namespace, model: str) -> dict[str, Any]:
    root = Path(args.root) / model
    root.mkdir()
    res: dict[str, Any] = {"eager": {"fresh": run_child(args, "eager", "fresh", model, root / "eager", root)}}
    for store in ("torch", "precompile"):
        if store not in args.stores.split(","):
            res[store] = {"cold": {"crashed": "not run"}, "fresh": {"crashed": "not run"}, "bytes": 0}
            continue
        inductor = root / f"{store}-cold"
        store_dir = root / "store" if store == "precompile" else inductor / "dynamo"
        if store == "precompile" and args.reuse_store:
            # A store an earlier run kept: the fresh host alone, for profiling a change.
            shutil.copytree(Path(args.reuse_store) / model, store_dir)
            cold = {"crashed": "not run"}
        else:
            cold = run_child(args, store, "cold", model, inductor, store_dir)
        fresh_inductor = root / f"{store}-fresh"
        if store == "torch":
            # torch's entries live inside the Inductor cache dir: carry only them.
            if store_dir.exists():
                shutil.copytree(store_dir, fresh_inductor / "dynamo")
            store_dir = fresh_inductor / "dynamo"
        # A stored object may name a file under the cold run's dir (a kernel's
        # source, its autotuning result beside it): a fresh host has no such path.
        shutil.rmtree(inductor, ignore_errors=True)
        fresh = run_child(args, store, "fresh", model, fresh_inductor, store_dir)
        if store == "precompile" and args.keep_store:
            # After the fresh host: its run record (`precompile explain`) is kept too.
            shutil.copytree(store_dir, Path(args.keep_store) / model, dirs_exist_ok=True)
        res[store] = {"cold": cold, "fresh": fresh, "bytes": warm_start._du(store_dir)}
    eager = res["eager"]["fresh"]
    for store in ("torch", "precompile"):
        fresh = res[store]["fresh"]
        if "crashed" not in fresh and "crashed" not in eager:
            fresh["compile_phase_s"] = fresh["first_call_s"] - eager["first_call_s"]
            fresh["kernels_per_s"] = (
                fresh["kernels"] / fresh["compile_phase_s"] if fresh["compile_phase_s"] > 0 else None
            )
    return res


def print_table(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    import torch

    size = "small" if args.small else "full"
    print(
        f"\nlarge models, device={args.device} ({size}), torch {torch.__version__}, seqs {args.seqs or _seqs_of(args.small)}"
    )
    print(
        f"{'model':<10}{'(fresh host unless cold)':<30}{'eager':>16}{'torch':>16}{'precompile':>16}{'torch/ours':>12}"
    )

    def get(cell: dict[str, Any], key: str | tuple[str, ...]) -> Any:
        if "crashed" in cell:
            return None
        if isinstance(key, tuple):  # several figures in one cell
            values = [cell.get(k) for k in key]
            return None if all(v is None for v in values) else values
        return cell.get(key)

    def fmt(v: Any, spec: str) -> str:
        if v is None:
            return "-"
        if isinstance(v, list):
            return "/".join("-" if x is None else format(x, spec) for x in v)
        return format(v, spec)

    rows = [
        ("cold first calls s", "cold", "first_call_s", ".2f"),
        ("first calls s", "fresh", "first_call_s", ".3f"),
        ("  import + install() s", "fresh", "install_s", ".3f"),
        ("  torch.compile() s", "fresh", "wrap_s", ".3f"),
        ("  per length s", "fresh", "calls_s", ".2f"),
        ("compile phase s", "fresh", "compile_phase_s", ".3f"),
        ("process start->output s", "fresh", "process_to_output_s", ".2f"),
        ("graphs compiled", "fresh", "graphs_compiled", "d"),
        ("compiler runs", "fresh", "compiler_runs", "d"),
        ("kernels loaded", "fresh", "kernels", "d"),
        ("kernels / s of compile phase", "fresh", "kernels_per_s", ",.0f"),
        ("load per kernel us (mean)", "fresh", "load_per_kernel_s", ".1f"),
        ("  median / first load us", "fresh", ("load_median_per_kernel_s", "load_first_per_kernel_s"), ".1f"),
        ("raw first loads us (mean)", "fresh", "raw_per_kernel_s", ".1f"),
        ("  median / first load us", "fresh", ("raw_median_per_kernel_s", "raw_first_per_kernel_s"), ".1f"),
        ("raw repeat load us", "fresh", "raw_repeat_per_kernel_s", ".1f"),
    ]
    for model, res in results.items():
        for title, phase, key, spec in rows:
            last = key[-1] if isinstance(key, tuple) else key
            scale = 1e6 if last.endswith("per_kernel_s") else 1
            cells = []
            for store in ("eager", "torch", "precompile"):
                cell = res[store].get(phase) if store != "eager" or phase == "fresh" else None
                v = None if cell is None else get(cell, key)
                if isinstance(v, float) and scale != 1:
                    v *= scale
                elif isinstance(v, list) and scale != 1:
                    v = [None if x is None else x * scale for x in v]
                if store == "eager" and key in ("compile_phase_s", "kernels_per_s", "kernels"):
                    v = None
                cells.append(v)
            crashed = [
                res[s].get(phase, {}).get("crashed") if s != "eager" else None for s in ("eager", "torch", "precompile")
            ]
            text = [("-" if c == "not run" else "crash") if c else fmt(v, spec) for v, c in zip(cells, crashed)]
            t, p = cells[1], cells[2]
            ratio = (
                f"{t / p:.2f}x"
                if isinstance(t, float) and isinstance(p, float) and p > 0 and last.endswith("_s")
                else ""
            )
            print(f"{model:<10}{title:<30}{text[0]:>16}{text[1]:>16}{text[2]:>16}{ratio:>12}")
        print(f"{model:<10}{'store bytes':<30}{'':>16}{res['torch']['bytes']:>16,}{res['precompile']['bytes']:>16,}")
    print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    c = sub.add_parser("child")
    for name in ("--store", "--phase", "--model", "--device", "--work", "--store-dir", "--out", "--launched"):
        c.add_argument(name, required=True)
    c.add_argument("--small", action="store_true")
    c.add_argument("--profile", default="")
    c.add_argument("--profile-stores", default="precompile")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default="1b,breaks24", help="comma-separated: 1b, 8b, breaks24")
    ap.add_argument("--small", action="store_true", help="CPU-sized: 2 layers, lengths 16,32,64")
    ap.add_argument("--seqs", default="", help="sequence lengths (default 128,512,2048; --small 16,32,64)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--layers", type=int, default=0, help="override the Llamas' layer count (e.g. --small --layers 16)")
    ap.add_argument("--stores", default="torch,precompile", help="which stores to run beside eager")
    ap.add_argument("--keep-store", default="", help="copy precompile's filled store to DIR/MODEL")
    ap.add_argument("--reuse-store", default="", help="skip precompile's cold compile: start from DIR/MODEL")
    ap.add_argument(
        "--profile", default="", help="sample each fresh host's timed window: DIR/STORE-MODEL-fresh.txt and .folded"
    )
    ap.add_argument("--profile-stores", default="precompile", help="whose fresh host --profile covers")
    args = ap.parse_args()
    if args.cmd == "child":
        child(args)
        return
    warm_start._byte_compile_precompile()
    args.root = tempfile.mkdtemp(prefix="precompile-large-")
    results: dict[str, dict[str, Any]] = {}
    try:
        for model in args.model.split(","):
            results[model] = measure(args, model)
            if args.json:  # each model as it completes
                Path(args.json).write_text(json.dumps(results, indent=1))
    finally:
        shutil.rmtree(args.root, ignore_errors=True)
    print_table(results, args)


if __name__ == "__main__":
    main()
