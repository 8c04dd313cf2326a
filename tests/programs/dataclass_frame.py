"""A model output built by a dataclass whose `__post_init__` breaks the graph.

    python dataclass_frame.py compile|load STORE OUT_JSON

After the break Dynamo compiles the dataclass's generated `__init__` (file
"<string>") as a frame of its own, a code torch's package cannot name.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import torch

import precompile


@dataclasses.dataclass
class Output:
    hidden: torch.Tensor
    scaled: torch.Tensor | None = None

    def __post_init__(self) -> None:
        torch._dynamo.graph_break()
        self.scaled = self.hidden * 2


def forward(x: torch.Tensor) -> torch.Tensor:
    out = Output(x.sin())
    return out.scaled + 1


def main() -> None:
    mode, store, out_path = sys.argv[1:4]
    precompile.install(store, save_on_exit=False)
    result = torch.compile(forward)(torch.arange(6.0))
    report = precompile.save() if mode == "compile" else None
    from torch._dynamo.utils import counters

    with open(out_path, "w") as f:
        json.dump(
            {
                "result": result.tolist(),
                "expected": forward(torch.arange(6.0)).tolist(),
                "entries": len(report.entries) if report else None,
                "counters": {k: dict(v) for k, v in counters.items()},
            },
            f,
        )


if __name__ == "__main__":
    main()
