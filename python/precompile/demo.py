"""`precompile demo`: compile once, then warm-start on empty caches.

Two fresh processes share only the store. The first compiles a small
transformer block with `torch.compile` and saves it; the second gets an empty
Inductor cache dir, as on a new machine, and loads it. The demo says what
each process did (compiled graphs, or loaded entries from the store) and how
long it took, and checks that the outputs agree. The store is a temporary
one, deleted at the end, unless `--store` names one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

# torch's own warnings (a missing NumPy, deprecations) say nothing about the
# demo; the store's PrecompileWarnings still show.
_TORCH_WARNINGS = r"torch(\.|$)"


def _quiet_torch() -> None:
    warnings.filterwarnings("ignore", module=_TORCH_WARNINGS)
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")


def _model() -> tuple[Any, Any]:
    import torch

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 256, batch_first=True, dropout=0.0)
    # Train mode with dropout 0 computes what eval mode does, but keeps the
    # fused inference op out, so Inductor generates the layer's kernels.
    return layer.train(), torch.randn(2, 16, 64)


def _child(mode: str, store: str, out: str) -> None:
    _quiet_torch()
    import torch

    import precompile

    precompile.install(store, save_on_exit=False)
    model, x = _model()
    start = time.perf_counter()
    with torch.no_grad():
        compiled: Any = torch.compile(model)
        y = compiled(x)
    seconds = time.perf_counter() - start
    saved = len(precompile.save().entries) if mode == "compile" else 0
    from ._torch import counters

    torch.save(y, out + ".pt")
    with open(out, "w") as f:
        json.dump(
            {
                "seconds": seconds,
                "hits": counters["dynamo_cache"]["dynamo_cache_hit"],
                "loaded": counters["precompile"]["entries_loaded"],
                # Graphs Dynamo traced and handed to Inductor in this process.
                "compiled": counters["stats"]["unique_graphs"],
                "saved": saved,
            },
            f,
        )


def _side(mode: str, store: str, work: str) -> dict[str, Any]:
    out = os.path.join(work, mode + ".json")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": os.path.join(work, mode + "-inductor")}
    proc = subprocess.run(
        [sys.executable, "-m", "precompile.demo", mode, store, out],
        env=env,
        capture_output=True,
        text=True,
        errors="replace",
    )
    if proc.returncode != 0:
        # Its stderr says why; the command line shows its last lines.
        raise subprocess.CalledProcessError(proc.returncode, proc.args, stderr=proc.stderr)
    with open(out) as f:
        result: dict[str, Any] = json.load(f)
    result["out"] = out + ".pt"
    return result


def _plural(n: int, word: str, words: str) -> str:
    return f"{n} {word if n == 1 else words}"


def _did(side: dict[str, Any]) -> str:
    """What a process did, from its own counters."""
    parts = []
    if side["loaded"]:
        parts.append(f"loaded {_plural(side['loaded'], 'entry', 'entries')} from the store")
    if side["compiled"]:
        parts.append(f"compiled {_plural(side['compiled'], 'graph', 'graphs')}")
    if side["saved"]:
        parts.append(f"saved {_plural(side['saved'], 'entry', 'entries')}")
    return ", ".join(parts) or "neither compiled nor loaded"


def run(store: str | None, print_fn: Callable[[str], object] = print) -> int:
    """Runs the demo against `store` (None: a temporary store); returns an exit status."""
    with tempfile.TemporaryDirectory(prefix="precompile-demo-") as work:
        if store is None:
            store = os.path.join(work, "store")
            print_fn("store: a temporary one, deleted at the end (--store PATH keeps it)")
        else:
            print_fn(f"store: {store}")
        try:
            print_fn("process 1, empty caches: compiling a transformer layer (about 20 s) ...")
            cold = _side("compile", store, work)
            print_fn(f"process 1: {_did(cold)} in {cold['seconds']:.2f} s")
            print_fn("process 2, empty caches, new process: running the same model ...")
            warm = _side("load", store, work)
            print_fn(f"process 2: {_did(warm)} in {warm['seconds']:.2f} s")
        except RuntimeError as e:
            print_fn(f"demo failed: {e}")
            return 1
        with warnings.catch_warnings():
            _quiet_torch()
            import torch

            same = torch.equal(torch.load(cold["out"]), torch.load(warm["out"]))
    print_fn(f"outputs identical: {same}; store hits in process 2: {warm['hits']}")
    return 0 if same and warm["hits"] >= 1 else 1


if __name__ == "__main__":
    _child(*sys.argv[1:4])
