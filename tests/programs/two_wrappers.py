"""One side of a two-wrapper warm-start test, run as a subprocess.

    python two_wrappers.py NAME compile|load STORE OUT_JSON

Two `torch.compile` wrappers of one function (`function`) or of one model
class (`modules`), one static and one `dynamic=True`, each called in the
first process. `load` calls them again in a fresh process, in the same
order, then calls the static wrapper at a size it never saw: its own static
graph cannot serve that size, so it compiles (`graphs_after_new_size`),
where the dynamic wrapper's graph, served to it wrongly, would not.

Two wrappers of one lineage (plain `torch.compile`), each compiling graphs
of its own: `instances`, two instances of one model class, one training and
one evaluating (Dynamo guards on `training`); `regional`, two blocks of
different classes each compiled by `Module.compile()`, whose wrappers are
both of `Module._call_impl`.
Writes the outputs (OUT_JSON.pt) and the counters (OUT_JSON).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import torch

import precompile


def scaled_sine(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).sin() + x.shape[0]


class Gate(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.lin(x).sigmoid()


class Mix(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Reading `training` makes Dynamo guard on it.
        return self.lin(x).relu() * (x.shape[0] if self.training else -x.shape[0])


def _wrappers(name: str) -> tuple[Callable[..., torch.Tensor], Callable[..., torch.Tensor], int]:
    if name == "function":
        return torch.compile(scaled_sine), torch.compile(scaled_sine, dynamic=True), 0
    if name == "instances":
        torch.manual_seed(1)
        training, evaluating = Mix(), Mix().eval()
        evaluating.load_state_dict(training.state_dict())
        return torch.compile(training), torch.compile(evaluating), 8
    if name == "regional":
        torch.manual_seed(1)
        mix, gate = Mix(), Gate()
        mix.compile()
        gate.compile()
        return mix, gate, 8
    torch.manual_seed(1)
    static, dynamic = Mix(), Mix()
    dynamic.load_state_dict(static.state_dict())
    return torch.compile(static), torch.compile(dynamic, dynamic=True), 8


def main() -> None:
    name, mode, store, out_path = sys.argv[1:5]
    from torch._dynamo.utils import counters

    precompile.install(store, save_on_exit=False)
    static, dynamic, width = _wrappers(name)

    def x(n: int) -> torch.Tensor:
        torch.manual_seed(n)
        return torch.randn(n, width) if width else torch.randn(n)

    with torch.no_grad():
        outputs = [static(x(4)), dynamic(x(5)), dynamic(x(7)), static(x(4))]
        graphs = counters["stats"]["unique_graphs"]
        after_new_size = None
        if mode == "load":
            outputs.append(dynamic(x(11)))
            static(x(6))
            after_new_size = counters["stats"]["unique_graphs"] - graphs
    report = None
    if mode == "compile":
        report = sorted(precompile.save().entries)
    torch.save(outputs, out_path + ".pt")
    with open(out_path, "w") as f:
        json.dump(
            {
                "counters": {k: dict(v) for k, v in counters.items()},
                "report": report,
                "graphs": graphs,
                "graphs_after_new_size": after_new_size,
            },
            f,
        )


if __name__ == "__main__":
    main()
