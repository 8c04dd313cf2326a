"""One side of the class-body warm-start test, run as a subprocess.

    python class_body.py NAME compile|load STORE OUT_JSON

A model whose methods are decorated with `@torch.compile` in its class body:
`forward` plainly and `scale` with `dynamic=True` (a lineage of its own).
The store is installed before the class body runs, since torch ties each
wrapper to the cache when it wraps. Both methods are called twice; `compile`
saves. Writes the outputs (OUT_JSON.pt) and the counters (OUT_JSON).
"""

from __future__ import annotations

import json
import sys

import torch

import precompile

NAME, MODE, STORE, OUT = sys.argv[1:5]
precompile.install(STORE, save_on_exit=False)


class Decorated(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    @torch.compile
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).relu() + 1

    @torch.compile(dynamic=True)
    def scale(self, x: torch.Tensor) -> torch.Tensor:
        return (x * x.shape[0]).sin()


def main() -> None:
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    model = Decorated()
    with torch.no_grad():
        outputs = [model(torch.randn(4, 8)), model.scale(torch.randn(5, 8)), model.scale(torch.randn(7, 8))]
    report = sorted(precompile.save().entries) if MODE == "compile" else None
    torch.save(outputs, OUT + ".pt")
    with open(OUT, "w") as f:
        json.dump(
            {
                "counters": {k: dict(v) for k, v in counters.items()},
                "report": report,
                "graphs": counters["stats"]["unique_graphs"],
            },
            f,
        )


if __name__ == "__main__":
    main()
