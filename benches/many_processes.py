"""Many serving processes starting together on one host, from one store or one bundle.

    python benches/many_processes.py [--procs 8] [--model transformer] [--device cpu|cuda] [--json FILE]

A cold process compiles the model once into a precompile store (and, for the
anchor, into torch's `DiskDynamoCache`); the store is exported to one signed
bundle. Then, each configuration on a fresh host (a new Inductor and Triton
cache dir shared by its processes; only the store, bundle or torch's
`dynamo/` dir travels), N processes are spawned, wait at one barrier (a line
on their stdin, written to all of them at once) and then import torch,
install, build the model and make the first call:

- eager PyTorch, one process: the floor;
- torch's `DiskDynamoCache`, one process and N at once;
- precompile from one store dir, one process and N at once;
- precompile from one bundle (`install(layers=[bundle], trusted_keys=[key])`,
  an empty local store shared by the N), N at once.

It reports the time from the barrier until ALL processes have printed their
first output, each process's time, and memory read while every process is
alive after its first output: RSS and PSS (`/proc/<pid>/smaps_rollup`; PSS
counts a page shared by k processes 1/k in each, so the sum counts the
store's mapped pages once) and, from `/proc/<pid>/smaps`, the PSS and RSS of
mappings of files under the store dir or of the bundle.

`--model` is one of benches/models.py (`mlp`, `transformer`, `convnet`).
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
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import warm_start  # noqa: E402  (the compiler spy, byte compile, graph counts)

KiB, MiB = 1 << 10, 1 << 20


# ---------------------------------------------------------------- child side
def child(args: argparse.Namespace) -> None:
    """One serving process: wait at the barrier, start, answer, stay alive until told."""
    if args.phase != "cold" and sys.stdin.readline().strip() != "go":
        return
    started = time.time()
    import models
    import torch

    if args.system != "eager":
        # Only when compiling: touching `torch._dynamo` imports it, which eager's floor must not pay.
        torch._dynamo.config.caching_precompile = True
    if args.system == "precompile":
        import precompile

        precompile.install(args.store, save_on_exit=False)
    elif args.system == "bundle":
        import precompile

        precompile.install(args.store, layers=[args.bundle], trusted_keys=[args.trusted], save_on_exit=False)
    model, x = models.build(args.model, args.device)
    with torch.no_grad():
        t = time.perf_counter()
        (model if args.system == "eager" else torch.compile(model))(x)
        if args.device == "cuda":
            torch.cuda.synchronize()
        first = time.perf_counter() - t
    if args.phase == "cold":
        if args.system == "precompile":
            precompile.save()
        else:
            torch.compiler.save_cache_artifacts()
        return
    from torch._dynamo.utils import counters

    report = {
        "ready_at": time.time(),
        "started_at": started,
        "first_call_s": first,
        "graphs_compiled": warm_start._graphs_compiled({k: dict(v) for k, v in counters.items()}),
    }
    print("ready " + json.dumps(report), flush=True)
    sys.stdin.read()  # alive until the parent has read its memory


# --------------------------------------------------------------- parent side
def _env(work: Path, inductor: Path) -> dict[str, str]:
    return warm_start.fresh_host_env(work, inductor)


def _cmd(
    args: argparse.Namespace, system: str, phase: str, store: Path, bundle: str = "", trusted: str = ""
) -> list[str]:
    return [
        sys.executable,
        __file__,
        "child",
        *("--system", system, "--phase", phase, "--model", args.model, "--device", args.device),
        *("--store", str(store), "--bundle", bundle, "--trusted", trusted),
    ]


def memory(pid: int, shared_paths: list[str]) -> dict[str, int]:
    """RSS and PSS of a process, and of its mappings of files under `shared_paths`, in bytes."""
    out = {"rss": 0, "pss": 0, "store_rss": 0, "store_pss": 0}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, value = line.split(":", 1)
        if name in ("Rss", "Pss"):
            out[name.lower()] = int(value.split()[0]) * KiB
    in_store = False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(maxsplit=5)
        if head and "-" in head[0] and not head[0].endswith(":"):
            path = head[5].strip() if len(head) == 6 else ""
            in_store = any(path.startswith(p) for p in shared_paths)
        elif in_store and head and head[0] in ("Rss:", "Pss:"):
            out["store_" + head[0][:-1].lower()] += int(head[1]) * KiB
    return out


def start_together(
    args: argparse.Namespace, label: str, cmd: list[str], n: int, work: Path, inductor: Path, shared: list[str]
) -> dict[str, Any]:
    """Spawn `n` processes, release them at once, wait for all first outputs, read their memory."""
    work.mkdir(parents=True, exist_ok=True)
    env = _env(work, inductor)
    (work / "compiler.log").unlink(missing_ok=True)
    procs = [
        subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(n)
    ]
    time.sleep(1.0)  # every interpreter up and waiting at the barrier
    released = time.time()
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    reports = []
    try:
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            if not line.startswith("ready "):
                p.kill()
                raise SystemExit(f"{label}: a process failed:\n{p.communicate()[1][-3000:]}")
            reports.append(json.loads(line[len("ready ") :]))
        all_ready = time.time() - released
        mem = [memory(p.pid, shared) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.communicate("", timeout=120)
    per = [r["ready_at"] - released for r in reports]
    print(f"  {label}: {n} ready in {all_ready:.2f} s", file=sys.stderr)
    return {
        "procs": n,
        "all_ready_s": all_ready,
        "per_process_s": per,
        "first_call_s": [r["first_call_s"] for r in reports],
        "graphs_compiled": sum(r["graphs_compiled"] for r in reports),
        "compiler_runs": warm_start._compiler_runs(work / "compiler.log"),
        "memory": mem,
    }


def measure(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    import precompile
    from precompile import Store

    store, torch_cold = root / "store", root / "torch-cold"
    for system, inductor in (("precompile", root / "precompile-cold"), ("torch", torch_cold)):
        subprocess.run(_cmd(args, system, "cold", store), env=_env(root / "cold", inductor), check=True)
        print(f"  compiled with {system}", file=sys.stderr)
    key = str(root / "release.key")
    public = precompile.keygen(key)
    bundle = root / "model.bundle"
    Store(str(store)).export_bundle(None, bundle, sign_with=key)

    n, res = args.procs, {}
    # precompile first, torch's compiling anchor last: on a loaded machine a
    # run cut short still has the figures it is about.
    configs: list[tuple[str, str, int, list[str]]] = [
        ("eager, 1 process", "eager", 1, []),
        ("precompile store dir, 1 process", "precompile", 1, [str(store) + os.sep]),
        (f"precompile store dir, {n} processes", "precompile", n, [str(store) + os.sep]),
        (f"precompile bundle, {n} processes", "bundle", n, [str(bundle)]),
        ("torch DiskDynamoCache, 1 process", "torch", 1, []),
        (f"torch DiskDynamoCache, {n} processes", "torch", n, []),
    ]
    res["bundle_bytes"] = bundle.stat().st_size
    res["store_bytes"] = warm_start._du(store)
    for i, (label, system, count, shared) in enumerate(configs):
        host = root / f"host{i}"
        inductor = host / "inductor"
        if system == "torch":
            # torch's entries live inside the Inductor cache dir: carry only them.
            shutil.copytree(torch_cold / "dynamo", inductor / "dynamo")
        local = store if system == "precompile" else host / "local-store"
        cmd = _cmd(args, system, "fresh", local, str(bundle), public)
        res[label] = start_together(args, label, cmd, count, host, inductor, shared)
        if args.json:  # each configuration as it completes
            Path(args.json).write_text(json.dumps(res, indent=1))
    return res


def print_table(res: dict[str, Any], args: argparse.Namespace) -> None:
    import torch

    print(f"\n{args.procs} processes on one host, model {args.model}, device={args.device}, torch {torch.__version__}")
    print(
        f"{'':<38}{'all ready s':>12}{'per proc med':>13}{'max':>8}{'first call':>11}{'graphs':>7}{'cc runs':>8}"
        f"{'PSS MiB':>9}{'RSS MiB':>9}{'store PSS':>10}{'store RSS':>10}"
    )
    for label, r in res.items():
        if not isinstance(r, dict):
            continue
        mem = r["memory"]
        pss, rss = sum(m["pss"] for m in mem) / MiB, sum(m["rss"] for m in mem) / MiB
        spss, srss = sum(m["store_pss"] for m in mem) / MiB, sum(m["store_rss"] for m in mem) / MiB
        print(
            f"{label:<38}{r['all_ready_s']:>12.2f}{statistics.median(r['per_process_s']):>13.2f}"
            f"{max(r['per_process_s']):>8.2f}{statistics.median(r['first_call_s']):>11.3f}{r['graphs_compiled']:>7}"
            f"{r['compiler_runs']:>8}{pss:>9.0f}{rss:>9.0f}{spss:>10.2f}{srss:>10.2f}"
        )
    print(
        f"store {res['store_bytes']:,} bytes, bundle {res['bundle_bytes']:,} bytes; memory summed over the processes\n"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    c = sub.add_parser("child")
    for name in ("--system", "--phase", "--model", "--device", "--store", "--bundle", "--trusted"):
        c.add_argument(name, required=True)
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--model", default="transformer", help="mlp, transformer or convnet (benches/models.py)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    if args.cmd == "child":
        child(args)
        return
    warm_start._byte_compile_precompile()
    root = Path(tempfile.mkdtemp(prefix="precompile-many-"))
    try:
        res = measure(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    print_table(res, args)


if __name__ == "__main__":
    main()
