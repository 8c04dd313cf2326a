"""One rank of a distributed job (gloo, CPU) that compiles a small transformer block through the store.

    python ranks.py STORE {ddp,ddp_optimizer,tp,single,breaks}

Env: RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT as torchrun sets them
(`single`, `breaks`: no process group, single flight on through
`PRECOMPILE_SINGLE_FLIGHT`). `ddp` trains one step of
`DistributedDataParallel(torch.compile(block))` (`ddp_optimizer`: under
torch's default DDPOptimizer); `tp` runs the block sharded
with tensor parallelism (its graph holds the all-reduce) under `no_grad`;
`single` calls the block once, `breaks` three blocks with graph breaks. Prints one JSON line: the output (or loss),
the parameters after the step, the time of the first step, and the counters.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import precompile


class Block(nn.Module):
    """A pre-norm transformer MLP block, the part tensor parallelism shards."""

    def __init__(self, dim: int = 64, hidden: int = 256) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Breaks(nn.Module):
    """Three blocks with a graph break between each: three frames, the last
    two compiled during the first call (Dynamo's resume functions)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = Block(), Block(), Block()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.a(x)
        torch._dynamo.graph_break()
        x = self.b(x)
        torch._dynamo.graph_break()
        return self.c(x)


def main() -> None:
    store, mode = sys.argv[1], sys.argv[2]
    # The waits, as they happen, for a test that watches for them.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    flight_log = logging.getLogger("precompile._torch.single_flight")
    flight_log.addHandler(handler)
    flight_log.setLevel(logging.INFO)

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if mode not in ("single", "breaks"):
        import torch.distributed as dist

        dist.init_process_group("gloo", rank=rank, world_size=world)
    precompile.install(store)
    torch.manual_seed(0)
    block = Block()
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(1))

    start = time.perf_counter()
    if mode in ("ddp", "ddp_optimizer"):
        # DDPOptimizer (torch's default) splits the graph per gradient bucket
        # and torch records no package for such a frame: `ddp` turns it off.
        torch._dynamo.config.optimize_ddp = mode == "ddp_optimizer"
        model = nn.parallel.DistributedDataParallel(torch.compile(block))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        result = [loss.item()]
    elif mode == "tp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        mesh = init_device_mesh("cpu", (world,))
        model = torch.compile(parallelize_module(block, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()}))
        with torch.no_grad():
            result = model(x).flatten()[:16].tolist()
    else:
        model = torch.compile(Breaks() if mode == "breaks" else block)
        with torch.no_grad():
            result = model(x).flatten()[:16].tolist()
    first_step = time.perf_counter() - start

    from torch._dynamo.utils import counters

    params = [p.detach().flatten()[:4].tolist() for p in block.parameters()] if mode.startswith("ddp") else []
    print(
        json.dumps(
            {
                "rank": rank,
                "result": result,
                "params": params,
                "first_step_s": first_step,
                "counters": {k: dict(v) for k, v in counters.items()},
            }
        ),
        flush=True,
    )
    if mode not in ("single", "breaks"):
        import torch.distributed as dist

        dist.destroy_process_group()


if __name__ == "__main__":
    main()
