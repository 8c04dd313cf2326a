"""A fleet on one Redis remote: a build host compiles, fresh hosts warm-start.

    python benches/fleet_bench.py [--hosts 8] [--baseline-hosts 2]
                                  [--models mlp,transformer,convnet] [--json FILE]
    python benches/fleet_bench.py --compile-once --hosts 100 [--wave 2] [--models mlp] [--json FILE]

It starts its own redis-server on a loopback port. A build host compiles the
models one after another into its store and the remote (`PRECOMPILE_REMOTE`);
the remote's bytes are read after each model. Then fresh hosts start: each is
a new process with its own empty store, its own empty Inductor and Triton
cache dirs and a compiler spy on PATH, sharing only the remote. They run one
after another, then all at once. Per host it reports the time of
`torch.compile` plus the first call summed over the models (in-process),
the bytes pulled from the remote and the compiler runs.

Side by side, in the same run and on the same server: torch's own Redis
caches (`TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE=1`,
`TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE=1`), filled by a torch build host and
read by fresh hosts, and fresh hosts compiling from scratch. These baselines
compile, so they run on `--baseline-hosts` hosts only.

`--compile-once`: a fleet that compiles once. The first of `--hosts` hosts
compiles the models and publishes them, signed (`PRECOMPILE_SIGNING_KEY`);
the others, trusting that key (`PRECOMPILE_TRUSTED_KEYS`), start in
concurrent waves of `--wave` hosts (default: the CPU count, at least 2 and
at most 4) and must each load without compiling. The bench fails unless the
fleet made exactly 1 compile and `hosts - 1` hits (a hit: Dynamo cache hits,
no graph compiled, no compiler run). It prints the hit rate, each host's time
(in-process `torch.compile` plus first calls, and process start to output),
their median and max / median, and what the remote served: bytes in and out
and commands processed (Redis `INFO stats` and `INFO commandstats` before and
after the fleet; a pipeline sends several commands in one round trip, so the
command count bounds the round trips from above).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
_COMPILERS = ("g++", "gcc", "c++", "cc", "clang", "clang++")


# ---------------------------------------------------------------- child side
def child(args: argparse.Namespace) -> None:
    import torch

    sys.path.insert(0, str(HERE))
    import models

    out: dict[str, Any] = {"first_call_s": {}}
    if args.system == "precompile":
        import precompile

        precompile.install(args.store, remote=args.remote, save_on_exit=False)
    for name in args.models.split(","):
        model, x = models.build(name, "cpu")
        with torch.no_grad():
            start = time.perf_counter()
            torch.compile(model)(x)
            out["first_call_s"][name] = time.perf_counter() - start
    if args.launched:
        # Process spawn to the end of the first calls: interpreter and imports included.
        out["process_to_output_s"] = time.time() - float(args.launched)
    if args.system == "precompile" and args.save:
        out["entries"] = sorted(precompile.save().refs.values())
    from torch._dynamo.utils import counters

    out["counters"] = {k: dict(v) for k, v in counters.items()}
    Path(args.out).write_text(json.dumps(out))


# --------------------------------------------------------------- parent side
class Host:
    """One host: a fresh process with its own dirs, sharing only the remote."""

    def __init__(self, root: Path, name: str, system: str, models: str, env: dict[str, str]) -> None:
        self.dir = root / name
        (self.dir / "bin").mkdir(parents=True, exist_ok=True)
        self.log = self.dir / "compiler.log"
        for compiler in _COMPILERS:
            real = shutil.which(compiler)
            if real is not None:
                spy = self.dir / "bin" / compiler
                spy.write_text(f'#!/bin/sh\necho "$*" >> "{self.log}"\nexec "{real}" "$@"\n')
                spy.chmod(0o755)
        self.env = {
            **os.environ,
            **env,
            "TORCHINDUCTOR_CACHE_DIR": str(self.dir / "inductor"),
            "TRITON_CACHE_DIR": str(self.dir / "triton"),
            "PATH": f"{self.dir / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        self.cmd = [
            sys.executable,
            __file__,
            "child",
            "--system",
            system,
            "--models",
            models,
            "--store",
            str(self.dir / "store"),
            "--out",
            str(self.dir / "out.json"),
        ]

    def start(self, *extra: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*self.cmd, *extra],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def finish(self, proc: subprocess.Popen[str]) -> dict[str, Any]:
        _, stderr = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"host {self.dir.name} failed:\n{stderr[-4000:]}")
        result: dict[str, Any] = json.loads((self.dir / "out.json").read_text())
        runs = self.log.read_text().splitlines() if self.log.exists() else []
        result["compiler_runs"] = len([r for r in runs if r.strip() not in ("--version", "-v")])
        result["total_s"] = sum(result["first_call_s"].values())
        result["warned"] = "PrecompileWarning" in stderr
        return result

    def run(self, *extra: str) -> dict[str, Any]:
        return self.finish(self.start(*extra))


def _start_redis(root: Path) -> tuple[subprocess.Popen[bytes], int]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not on PATH (apt-get install redis-server)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(root),
        ],
        stdout=subprocess.DEVNULL,
    )
    import redis

    deadline = time.monotonic() + 10
    while True:
        try:
            with redis.Redis(port=port) as client:
                client.ping()
            return proc, port
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _torch_remote_bytes(port: int) -> int:
    import redis

    with redis.Redis(port=port, db=0) as client:
        return sum(client.memory_usage(k) or 0 for k in client.scan_iter(count=1000))


def measure(args: argparse.Namespace, root: Path, port: int) -> dict[str, Any]:
    from precompile import Store
    from precompile.remote import Remote, local_closure, remote_usage

    url = f"redis://127.0.0.1:{port}/1"
    remote = Remote(url)
    torch_env = {
        "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1",
        "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE": "1",
        "TORCHINDUCTOR_REDIS_HOST": "127.0.0.1",
        "TORCHINDUCTOR_REDIS_PORT": str(port),
    }
    models = args.models.split(",")
    res: dict[str, Any] = {"models": models, "build": []}
    # The build host signs what it pushes; fresh hosts trust that key.
    import precompile

    key = str(root / "fleet.key")
    public = precompile.keygen(key)

    # The build host: one model at a time, the remote measured after each.
    seen: set[str] = set()
    for name in models:
        build = Host(root, "build", "precompile", name, {"PRECOMPILE_REMOTE": url, "PRECOMPILE_SIGNING_KEY": key})
        before = remote_usage(remote)["bytes"]
        r = build.run("--save")
        store = Store(str(build.dir / "store"))
        closure = local_closure(store, [store.get_ref(name) for name in r["entries"]])
        sizes = {d: os.path.getsize(store.object_path(d)) for d in closure}
        new = sum(n for d, n in sizes.items() if d not in seen)
        seen.update(closure)
        res["build"].append(
            {
                "model": name,
                "compile_s": r["total_s"],
                "entry_bytes": sum(sizes.values()),
                "new_bytes": new,
                "remote_added_bytes": remote_usage(remote)["bytes"] - before,
            }
        )
        print(f"  built {name}", file=sys.stderr)
    usage = remote_usage(remote)
    res["remote"] = {k: usage[k] for k in ("entries", "blobs", "bytes", "logical_bytes", "dedup_ratio")}

    Host(root, "torch-build", "torch", args.models, torch_env).run()
    res["torch_remote_bytes"] = _torch_remote_bytes(port)
    print("  built torch's remote caches", file=sys.stderr)

    def hosts(kind: str, system: str, env: dict[str, str], n: int, together: bool) -> list[dict[str, Any]]:
        made = [
            Host(
                root,
                f"{kind}-{'par' if together else 'seq'}-{i}",
                system,
                args.models,
                env,
            )
            for i in range(n)
        ]
        if together:
            procs = [h.start() for h in made]
            out = [h.finish(p) for h, p in zip(made, procs)]
        else:
            out = [h.run() for h in made]
        print(
            f"  ran {n} {kind} hosts {'at once' if together else 'one after another'}",
            file=sys.stderr,
        )
        return out

    precompile_env = {"PRECOMPILE_REMOTE": url, "PRECOMPILE_TRUSTED_KEYS": public}
    res["precompile_seq"] = hosts("precompile", "precompile", precompile_env, args.hosts, False)
    res["precompile_par"] = hosts("precompile", "precompile", precompile_env, args.hosts, True)
    res["torch_seq"] = hosts("torch-remote", "torch", torch_env, args.baseline_hosts, False)
    res["torch_par"] = hosts("torch-remote", "torch", torch_env, args.baseline_hosts, True)
    res["scratch_seq"] = hosts("scratch", "torch", {}, args.baseline_hosts, False)
    return res


def _row(label: str, runs: list[dict[str, Any]]) -> str:
    t = [r["total_s"] for r in runs]
    pulled = [r["counters"].get("precompile_remote", {}).get("bytes_read", 0) for r in runs]
    compilers = sum(r["compiler_runs"] for r in runs)
    hits = [r["counters"].get("dynamo_cache", {}).get("dynamo_cache_hit", 0) for r in runs]
    fx_hits = [r["counters"].get("inductor", {}).get("fxgraph_cache_hit", 0) for r in runs]
    return (
        f"{label:<38}{len(runs):>6}{statistics.median(t):>10.2f}{min(t):>9.2f}{max(t):>9.2f}"
        f"{statistics.median(pulled):>14,.0f}{compilers:>10}{min(hits):>8}{min(fx_hits):>9}"
    )


def print_table(res: dict[str, Any]) -> None:
    print(f"\nfleet warm start on CPU, models: {', '.join(res['models'])}")
    print("\nbuild host, one model at a time")
    print(f"{'model':<14}{'compile s':>10}{'entry bytes':>14}{'new bytes':>14}{'remote added':>14}")
    for b in res["build"]:
        print(
            f"{b['model']:<14}{b['compile_s']:>10.2f}{b['entry_bytes']:>14,}{b['new_bytes']:>14,}"
            f"{b['remote_added_bytes']:>14,}"
        )
    r = res["remote"]
    print(
        f"remote: {r['entries']} entries, {r['blobs']} blobs, {r['bytes']:,} bytes stored; "
        f"sum of the entries {r['logical_bytes']:,} bytes (dedup {r['dedup_ratio']:.2f}x); "
        f"torch's remote caches hold {res['torch_remote_bytes']:,} bytes (Redis MEMORY USAGE)"
    )
    print("\nfresh hosts: torch.compile + first call, summed over the models, seconds")
    print(
        f"{'':<38}{'hosts':>6}{'median':>10}{'min':>9}{'max':>9}{'bytes pulled':>14}{'compiler':>10}{'hits':>8}{'fx hits':>9}"
    )
    print(_row("precompile remote, one after another", res["precompile_seq"]))
    print(_row("precompile remote, all at once", res["precompile_par"]))
    print(_row("torch remote caches, one after another", res["torch_seq"]))
    print(_row("torch remote caches, all at once", res["torch_par"]))
    print(_row("compile from scratch", res["scratch_seq"]))
    ours = statistics.median(x["total_s"] for x in res["precompile_seq"])
    theirs = statistics.median(x["total_s"] for x in res["torch_seq"])
    scratch = statistics.median(x["total_s"] for x in res["scratch_seq"])
    print(
        f"\nfresh host from the remote: {theirs / ours:.1f}x faster than torch's remote caches, "
        f"{scratch / ours:.1f}x faster than compiling (medians, one after another)\n"
    )


# ------------------------------------------------------ a fleet that compiles once
def _redis_counts(port: int) -> dict[str, int]:
    """The server's traffic so far: bytes in and out, commands (all and per command)."""
    import redis

    with redis.Redis(port=port) as client:
        stats = client.info("stats")
        commands = client.info("commandstats")
    out = {k: int(stats[k]) for k in ("total_net_input_bytes", "total_net_output_bytes", "total_commands_processed")}
    out.update({name: int(v["calls"]) for name, v in commands.items()})
    return out


def _graphs_compiled(result: dict[str, Any]) -> int:
    from warm_start import _graphs_compiled as graphs_compiled  # FX-graph plus AOTAutograd cache misses

    return graphs_compiled(result["counters"])


def compile_once(args: argparse.Namespace, root: Path, port: int) -> dict[str, Any]:
    """The first host compiles and publishes (signed); the rest start in waves and load."""
    import precompile

    url = f"redis://127.0.0.1:{port}/1"
    key = str(root / "fleet.key")
    public = precompile.keygen(key)
    wave = args.wave or max(2, min(4, os.cpu_count() or 2))
    publisher = Host(
        root, "host000", "precompile", args.models, {"PRECOMPILE_REMOTE": url, "PRECOMPILE_SIGNING_KEY": key}
    )
    first = publisher.run("--save", "--launched", repr(time.time()))
    first["host"] = "host000"
    print("  host000 compiled and published", file=sys.stderr)
    # Reading the counters is itself traffic: measure one reading and take it off.
    first_read = _redis_counts(port)
    before = _redis_counts(port)
    own = {k: before.get(k, 0) - first_read.get(k, 0) for k in before}
    env = {"PRECOMPILE_REMOTE": url, "PRECOMPILE_TRUSTED_KEYS": public}
    fleet = [Host(root, f"host{i:03d}", "precompile", args.models, env) for i in range(1, args.hosts)]
    results: list[dict[str, Any]] = []
    started = time.perf_counter()
    for at in range(0, len(fleet), wave):
        batch = fleet[at : at + wave]
        procs = [h.start("--launched", repr(time.time())) for h in batch]
        for h, p in zip(batch, procs):
            r = h.finish(p)
            r["host"] = h.dir.name
            results.append(r)
            shutil.rmtree(h.dir, ignore_errors=True)  # 100 hosts' caches would fill a small disk
        print(f"  {len(results)} / {len(fleet)} hosts loaded", file=sys.stderr)
    fleet_s = time.perf_counter() - started
    after = _redis_counts(port)
    return {
        "hosts": args.hosts,
        "wave": wave,
        "models": args.models.split(","),
        "publisher": first,
        "fleet": results,
        "fleet_s": fleet_s,
        "remote_delta": {k: v for k in after if (v := after[k] - before.get(k, 0) - own.get(k, 0)) != 0},
    }


def _compiled(r: dict[str, Any]) -> bool:
    return _graphs_compiled(r) > 0 or r["compiler_runs"] > 0


def _hit(r: dict[str, Any]) -> bool:
    return not _compiled(r) and r["counters"].get("dynamo_cache", {}).get("dynamo_cache_hit", 0) > 0


def print_compile_once(res: dict[str, Any]) -> None:
    everyone = [res["publisher"], *res["fleet"]]
    compiles, hits = sum(map(_compiled, everyone)), sum(map(_hit, everyone))
    loaders = len(res["fleet"])
    times = [r["total_s"] for r in res["fleet"]]
    wall = [r["process_to_output_s"] for r in res["fleet"]]
    med, wall_med = statistics.median(times), statistics.median(wall)
    print(
        f"\na fleet that compiles once: {res['hosts']} hosts, models {', '.join(res['models'])}, waves of {res['wave']}"
    )
    print(
        f"{'host':<10}{'compile+first calls s':>23}{'start->output s':>17}{'graphs':>8}{'cc runs':>9}{'hits':>6}{'bytes pulled':>14}"
    )
    for r in everyone:
        pulled = r["counters"].get("precompile_remote", {}).get("bytes_read", 0)
        hit = r["counters"].get("dynamo_cache", {}).get("dynamo_cache_hit", 0)
        print(
            f"{r['host']:<10}{r['total_s']:>23.2f}{r['process_to_output_s']:>17.2f}{_graphs_compiled(r):>8}"
            f"{r['compiler_runs']:>9}{hit:>6}{pulled:>14,}"
        )
    print(
        f"\ncompiles {compiles}, hits {hits} of {loaders} loading hosts (hit rate {hits / loaders:.1%}); "
        f"the publisher's compile and first calls {res['publisher']['total_s']:.2f} s"
    )
    print(
        f"loading hosts, compile+first calls: median {med:.2f} s, min {min(times):.2f}, max {max(times):.2f}, "
        f"max/median {max(times) / med:.2f} (goal <= 1.5)"
    )
    print(
        f"loading hosts, start->output: median {wall_med:.2f} s, max {max(wall):.2f}, "
        f"max/median {max(wall) / wall_med:.2f}; the {loaders} hosts took {res['fleet_s']:.0f} s in all"
    )
    d = res["remote_delta"]
    per_command = ", ".join(
        f"{k.removeprefix('cmdstat_')} {v:,}" for k, v in sorted(d.items()) if k.startswith("cmdstat_")
    )
    print(
        f"remote, for the {loaders} loading hosts: {d.get('total_net_output_bytes', 0):,} bytes out, "
        f"{d.get('total_net_input_bytes', 0):,} bytes in, {d.get('total_commands_processed', 0):,} commands "
        f"({d.get('total_commands_processed', 0) / loaders:.1f} per host: {per_command})\n"
    )


def check_compile_once(res: dict[str, Any]) -> None:
    """Exactly one compile (the publisher) and a hit on every other host."""
    everyone = [res["publisher"], *res["fleet"]]
    compiles, hits = sum(map(_compiled, everyone)), sum(map(_hit, everyone))
    if not (_compiled(res["publisher"]) and compiles == 1 and hits == len(res["fleet"])):
        raise SystemExit(f"expected 1 compile and {len(res['fleet'])} hits, got {compiles} compiles and {hits} hits")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    c = sub.add_parser("child")
    for name in ("--system", "--models", "--store", "--out"):
        c.add_argument(name, required=True)
    c.add_argument("--remote")
    c.add_argument("--save", action="store_true")
    c.add_argument("--launched", default="")
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--baseline-hosts", type=int, default=2)
    ap.add_argument("--models", default="mlp,transformer,convnet")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--compile-once", action="store_true", help="one host compiles, --hosts - 1 load (see above)")
    ap.add_argument("--wave", type=int, default=0, help="hosts started at once (--compile-once)")
    args = ap.parse_args()
    if args.cmd == "child":
        child(args)
        return
    root = Path(tempfile.mkdtemp(prefix="precompile-fleet-"))
    server, port = _start_redis(root)
    try:
        if args.compile_once:
            res = compile_once(args, root, port)
        else:
            res = measure(args, root, port)
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(root, ignore_errors=True)
    if args.compile_once:
        print_compile_once(res)
        if args.json:
            Path(args.json).write_text(json.dumps(res, indent=1))
        check_compile_once(res)
        return
    print_table(res)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
