"""Ranks of one job: time to the first step per rank, torch's per-rank caches against one shared store.

    python benches/ranks_bench.py [--world 2] [--modes ddp,tp] [--device cpu|cuda]

Each rank is its own process on a real process group (gloo on loopback; the
ranks of a one-GPU host share `cuda:0`). `ddp` trains one step of
`DistributedDataParallel(torch.compile(model))` (`optimize_ddp=False`), `tp`
runs the model sharded by tensor parallelism under `no_grad`; the model is
4 pre-norm transformer MLP blocks (dim 256, hidden 1024). For each store:

- eager: no compile, the floor;
- torch: torch's own DiskDynamoCache, one Inductor cache dir per rank (torch
  keys entries by device, so jobs keep a cache per rank), saved with
  `torch.compiler.save_cache_artifacts()`;
- precompile: one store for the host's ranks, single flight on (the
  default in a job of several ranks).

Phases: cold (every cache empty) and fresh host (new Inductor dirs; only
torch's `dynamo/` dirs or the store travel). The clock runs in-process from
before `torch.compile` to the end of the first step (`install()` included);
`start->step` is the wall time from spawning the rank to the end of its first
step. `graphs` is Dynamo graphs the rank compiled.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from rank_models import Model, tensor_parallel_plan

    launched = float(os.environ["BENCH_LAUNCHED"])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device(args.device)
    dist.init_process_group("gloo", rank=rank, world_size=world)

    torch.manual_seed(0)
    model = Model().to(device)
    x = torch.randn(32, 256, device=device)
    compile_fn = (lambda m: m) if args.store == "eager" else torch.compile
    start = time.perf_counter()
    if args.store == "precompile":
        import precompile

        precompile.install(args.store_dir, save_on_exit=args.phase == "cold")
    elif args.store == "torch":
        torch._dynamo.config.caching_precompile = True
    if args.mode == "ddp":
        if args.store != "eager":
            # DDPOptimizer's frames are never recorded; eager must not import Dynamo.
            torch._dynamo.config.optimize_ddp = False
        ddp = nn.parallel.DistributedDataParallel(compile_fn(model))
        loss = ddp(x).pow(2).mean()
        loss.backward()
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import parallelize_module

        mesh = init_device_mesh(args.device, (world,))
        tp = compile_fn(parallelize_module(model, mesh, tensor_parallel_plan()))
        with torch.no_grad():
            tp(x)
    if args.device == "cuda":
        torch.cuda.synchronize()
    step = time.perf_counter() - start
    to_step = time.time() - launched
    from torch._dynamo.utils import counters

    if args.phase == "cold" and args.store == "torch":
        torch.compiler.save_cache_artifacts()
    out = {"first_step_s": step, "start_to_step_s": to_step, "graphs": counters["stats"]["unique_graphs"]}
    Path(args.out).write_text(json.dumps(out))
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_job(args: argparse.Namespace, store: str, mode: str, phase: str, work: Path) -> list[dict]:
    port = str(_free_port())
    procs, outs = [], []
    for rank in range(args.world):
        out = work / f"{store}-{mode}-{phase}-{rank}.json"
        # torch: one cache dir per rank; precompile: one store, one Inductor dir per host.
        inductor = work / f"inductor-{store}-{mode}-{phase}" / (f"rank{rank}" if store == "torch" else "")
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": str(args.world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "TORCHINDUCTOR_CACHE_DIR": str(inductor),
            "TRITON_CACHE_DIR": str(inductor / "triton"),
            "BENCH_LAUNCHED": repr(time.time()),
        }
        cmd = [sys.executable, __file__, "--worker", "--store", store, "--mode", mode, "--phase", phase]
        cmd += ["--device", args.device, "--store-dir", str(work / f"store-{mode}"), "--out", str(out)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        outs.append(out)
    results = []
    for p, out in zip(procs, outs, strict=True):
        _, err = p.communicate(timeout=1800)
        if p.returncode != 0:
            results.append({"error": err.strip().splitlines()[-1] if err.strip() else f"exit {p.returncode}"})
        else:
            results.append(json.loads(out.read_text()))
    return results


def _carry_torch_caches(work: Path, mode: str, world: int) -> None:
    """A fresh host for torch: each rank's `dynamo/` dir, nothing else of its Inductor cache."""
    for rank in range(world):
        src = work / f"inductor-torch-{mode}-cold" / f"rank{rank}" / "dynamo"
        dst = work / f"inductor-torch-{mode}-fresh" / f"rank{rank}" / "dynamo"
        if src.is_dir():
            shutil.copytree(src, dst)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--modes", default="ddp,tp")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--store-dir", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    work = Path(tempfile.mkdtemp(prefix="ranks-bench-"))
    rows = []
    try:
        for mode in args.modes.split(","):
            for store in ("eager", "torch", "precompile"):
                for phase in ("cold",) if store == "eager" else ("cold", "fresh"):
                    if store == "torch" and phase == "fresh":
                        _carry_torch_caches(work, mode, args.world)
                    for rank, r in enumerate(run_job(args, store, mode, phase, work)):
                        rows.append((mode, store, "-" if store == "eager" else phase, rank, r))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.world} ranks, {args.device}, torch", end=" ")
    import torch

    print(torch.__version__)
    print(f"{'mode':<5} {'store':<11} {'phase':<6} {'rank':>4} {'first step':>11} {'start->step':>12} {'graphs':>7}")
    for mode, store, phase, rank, r in rows:
        if "error" in r:
            print(f"{mode:<5} {store:<11} {phase:<6} {rank:>4}  crashed: {r['error'][:80]}")
            continue
        print(
            f"{mode:<5} {store:<11} {phase:<6} {rank:>4} {r['first_step_s']:>10.2f}s "
            f"{r['start_to_step_s']:>11.2f}s {r['graphs']:>7}"
        )


if __name__ == "__main__":
    main()
