"""Frames of generated code, compiled after a graph break.

    python generated_frames.py compile|load STORE OUT_JSON [VARIANT]

VARIANT `dataclass` (the default): a model output built by a dataclass whose
`__post_init__` breaks the graph. After the break Dynamo compiles the
dataclass's generated `__init__` (file "<string>") as a frame of its own.
`dataclass_extra_field`: the same class with one more field, so its generated
`__init__` is other code. `exec_function`: the break is in a function made by
`exec` in a namespace that is no module, a code nothing can name.
`comprehension` and `comprehension_closure`: the break is inside a list
comprehension, of a module function and of a closure; from Python 3.12 Dynamo
moves such a comprehension into a function it generates.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import torch

import precompile

VARIANT = sys.argv[4] if len(sys.argv) > 4 else "dataclass"


class Output:
    hidden: torch.Tensor
    scaled: torch.Tensor | None = None

    def __post_init__(self) -> None:
        torch._dynamo.graph_break()
        self.scaled = self.hidden * 2


if VARIANT == "dataclass_extra_field":
    Output.__annotations__["extra"] = "int"
    Output.extra = 0  # type: ignore[attr-defined]
Output = dataclasses.dataclass(Output)  # type: ignore[misc]

# A namespace of its own, as code generated at run time may have: it names a
# module that is not imported, so the function reads no global (torch would
# look for that module to guard one).
_namespace: dict = {"__name__": "generated_helpers", "_break": torch._dynamo.graph_break}
exec(
    "def scaled(x, graph_break=_break):\n    graph_break()\n    return x * 2\n",
    _namespace,
)


def forward(x: torch.Tensor) -> torch.Tensor:
    out = Output(x.sin())
    return out.scaled + 1


def forward_exec(x: torch.Tensor) -> torch.Tensor:
    return _namespace["scaled"](x.sin()) + 1


def forward_comprehension(x: torch.Tensor) -> torch.Tensor:
    rows = [(torch._dynamo.graph_break(), row * 2)[1] for row in x.sin().unbind(0)]
    return torch.stack(rows) + 1


def _closure() -> object:
    scale = 3.0

    def forward_comprehension_closure(x: torch.Tensor) -> torch.Tensor:
        rows = [(torch._dynamo.graph_break(), row * scale)[1] for row in x.sin().unbind(0)]
        return torch.stack(rows) + 1

    return forward_comprehension_closure


FUNCTIONS = {
    "dataclass": forward,
    "dataclass_extra_field": forward,
    "exec_function": forward_exec,
    "comprehension": forward_comprehension,
    "comprehension_closure": _closure(),
}


def main() -> None:
    mode, store, out_path = sys.argv[1:4]
    precompile.install(store, save_on_exit=False)
    fn = FUNCTIONS[VARIANT]
    x = torch.arange(6.0).reshape(3, 2)
    result = torch.compile(fn)(x)
    report = precompile.save() if mode == "compile" else None
    from torch._dynamo.utils import counters

    with open(out_path, "w") as f:
        json.dump(
            {
                "result": result.flatten().tolist(),
                "expected": fn(x).flatten().tolist(),
                "entries": len(report.entries) if report else None,
                "counters": {k: dict(v) for k, v in counters.items()},
            },
            f,
        )


if __name__ == "__main__":
    main()
