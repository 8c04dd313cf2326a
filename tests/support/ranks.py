"""Starting the ranks of a real distributed job (gloo on loopback) as torchrun would, and reading what each reports."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .processes import PROGRAMS, child_env, last_line

RANKS = PROGRAMS / "ranks.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_ranks(
    store: Path, mode: str, world: int, inductor_dir: Path, env: Mapping[str, str] | None = None
) -> list[subprocess.Popen[str]]:
    """`world` ranks of `programs/ranks.py` on one fresh Inductor cache dir (one host)."""
    port = str(free_port())
    procs = []
    for rank in range(world):
        rank_env = child_env(
            {
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": str(world),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": port,
                "TORCHINDUCTOR_CACHE_DIR": str(inductor_dir),
                "OMP_NUM_THREADS": "1",
                **(env or {}),
            }
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, str(RANKS), str(store), mode],
                env=rank_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return procs


def finish(procs: list[subprocess.Popen[str]], timeout: float = 400) -> list[dict[str, Any]]:
    """Each rank's JSON result, in rank order; a rank that fails fails the test with its stderr."""
    results = []
    try:
        outputs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err[-4000:]
        result = json.loads(last_line(out))
        result["stderr"] = err
        results.append(result)
    return results


def run_ranks(
    store: Path, mode: str, world: int, inductor_dir: Path, env: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    return finish(start_ranks(store, mode, world, inductor_dir, env))
