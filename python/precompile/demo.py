"""`precompile demo`: compile once, then warm-start on empty caches.

Two fresh processes share only the store. The first compiles a small
transformer block with `torch.compile` and saves it; the second gets an empty
Inductor cache dir, as on a new machine, and loads it. The demo prints both
times and checks that the outputs agree.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any


def _model() -> tuple[Any, Any]:
    import torch

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 256, batch_first=True, dropout=0.0)
    # Train mode with dropout 0 computes what eval mode does, but keeps the
    # fused inference op out, so Inductor generates the layer's kernels.
    return layer.train(), torch.randn(2, 16, 64)


def _child(mode: str, store: str, out: str) -> None:
    import torch

    import precompile

    precompile.install(store, save_on_exit=False)
    model, x = _model()
    start = time.perf_counter()
    with torch.no_grad():
        compiled: Any = torch.compile(model)
        y = compiled(x)
    seconds = time.perf_counter() - start
    if mode == "compile":
        precompile.save()
    from ._torch import counters

    torch.save(y, out + ".pt")
    with open(out, "w") as f:
        json.dump({"seconds": seconds, "hits": counters["dynamo_cache"]["dynamo_cache_hit"]}, f)


def _side(mode: str, store: str, work: str) -> dict[str, Any]:
    out = os.path.join(work, mode + ".json")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": os.path.join(work, mode + "-inductor")}
    # Its stderr is kept for a failure's message (torch logs there freely).
    subprocess.run(
        [sys.executable, "-m", "precompile.demo", mode, store, out],
        env=env,
        check=True,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
    )
    with open(out) as f:
        result: dict[str, Any] = json.load(f)
    result["out"] = out + ".pt"
    return result


def run(store: str, print_fn=print) -> int:  # type: ignore[no-untyped-def]
    """Runs the demo against `store`; returns an exit status."""
    import torch

    with tempfile.TemporaryDirectory(prefix="precompile-demo-") as work:
        print_fn(f"store: {store}")
        cold = _side("compile", store, work)
        print_fn(f"process 1, empty caches, compiles:       {cold['seconds']:7.2f} s")
        warm = _side("load", store, work)
        print_fn(f"process 2, empty caches, loads the store: {warm['seconds']:7.2f} s")
        same = torch.equal(torch.load(cold["out"]), torch.load(warm["out"]))
    print_fn(f"outputs identical: {same}; store hits in process 2: {warm['hits']}")
    return 0 if same and warm["hits"] >= 1 else 1


if __name__ == "__main__":
    _child(*sys.argv[1:4])
