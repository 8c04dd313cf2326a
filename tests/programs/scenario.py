"""One side of a two-process warm-start test, run as a subprocess.

    python scenario.py NAME compile|load STORE OUT_JSON

`compile` installs precompile, compiles and runs scenario NAME, saves, and
writes outputs and counters; `load` does the same in a fresh process that
should find everything in the store. The parent test compares the two.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch

import precompile

torch.manual_seed(0)


class MLP(torch.nn.Module):
    def __init__(self, d_in: int = 16, d_hidden: int = 32, d_out: int = 8) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(d_in, d_hidden)
        self.l2 = torch.nn.Linear(d_hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.l2(torch.relu(self.l1(x)))).sum(-1)


def inference():
    model = MLP()
    fn = torch.compile(model)
    with torch.no_grad():
        return [fn(torch.randn(4, 16))]


def training():
    model = MLP()
    fn = torch.compile(model)
    x = torch.randn(4, 16)
    out = fn(x)
    out.sum().backward()
    return [out.detach(), model.l1.weight.grad, model.l2.bias.grad]


def _with_break(x: torch.Tensor) -> torch.Tensor:
    y = torch.sin(x) * 2
    torch._dynamo.graph_break()
    return torch.cos(y) + 1


def graph_break():
    fn = torch.compile(_with_break)
    return [fn(torch.randn(8, 8))]


def _scale(x: torch.Tensor) -> torch.Tensor:
    return (x * 3 + 1).relu().sum(0)


def dynamic():
    fn = torch.compile(_scale)
    return [fn(torch.randn(n, 4)) for n in (2, 3, 5, 9)]


def _shared_a(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x) * x + 1


def _shared_b(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x) * x + 1


def shared():
    a, b = torch.compile(_shared_a), torch.compile(_shared_b)
    x = torch.randn(16, 16)
    return [a(x), b(x)]


def forward_only():
    # A training graph whose backward never runs: its backend is never
    # recorded, which a save must report.
    model = MLP()
    fn = torch.compile(model)
    return [fn(torch.randn(4, 16)).detach()]


def cuda_transformer():
    layer = torch.nn.TransformerEncoderLayer(64, 4, 256, batch_first=True, dropout=0.0)
    # Train mode (dropout 0) keeps the fused inference op out, so Inductor
    # generates Triton kernels for the layers.
    model = torch.nn.TransformerEncoder(layer, 4, enable_nested_tensor=False).cuda().train()
    fn = torch.compile(model)
    with torch.no_grad():
        out = fn(torch.randn(4, 16, 64, device="cuda"))
    return [out.cpu()]


def cuda_shared():
    a, b = torch.compile(_shared_a), torch.compile(_shared_b)
    x = torch.randn(64, 64, device="cuda")
    return [a(x).cpu(), b(x).cpu()]


SCENARIOS = {
    "cuda_shared": cuda_shared,
    "cuda_transformer": cuda_transformer,
    "forward_only": forward_only,
    "inference": inference,
    "training": training,
    "graph_break": graph_break,
    "dynamic": dynamic,
    "shared": shared,
}


def main() -> None:
    name, mode, store, out_path = sys.argv[1:5]
    from torch._dynamo.utils import counters

    # Read-only layers (bundle files or store dirs) under the store, if any.
    layers = [p for p in os.environ.get("PRECOMPILE_TEST_LAYERS", "").split(os.pathsep) if p]
    # Public keys (or key files), comma-separated, that a bundle layer must be signed by.
    trusted = [k for k in os.environ.get("PRECOMPILE_TEST_TRUSTED_KEYS", "").split(",") if k]
    # "compile-at-exit" relies on install()'s save at interpreter exit.
    precompile.install(
        store, layers=layers, save_on_exit=mode == "compile-at-exit", trusted_keys=trusted or None
    )
    mega_in = os.environ.get("PRECOMPILE_TEST_MEGA_IN")
    if mega_in:
        # Mega-Cache: artifacts another process saved with
        # torch.compiler.save_cache_artifacts() populate this store.
        with open(mega_in, "rb") as f:
            torch.compiler.load_cache_artifacts(f.read())
    start = time.perf_counter()
    outputs = SCENARIOS[name]()
    elapsed = time.perf_counter() - start
    report = None
    if mode == "compile":
        mega_out = os.environ.get("PRECOMPILE_TEST_MEGA_OUT")
        if mega_out:
            saved = torch.compiler.save_cache_artifacts()
            assert saved is not None
            with open(mega_out, "wb") as f:
                f.write(saved[0])
        r = precompile.save()
        report = {
            "entries": r.entries,
            "backends": r.backends,
            "unique_backends": r.unique_backends,
            "missing_backends": r.missing_backends,
        }
    torch.save([o.detach() for o in outputs], out_path + ".pt")
    with open(out_path, "w") as f:
        json.dump(
            {
                "seconds": elapsed,
                "counters": {k: dict(v) for k, v in counters.items()},
                "report": report,
            },
            f,
        )


if __name__ == "__main__":
    main()
