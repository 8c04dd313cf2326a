"""One side of a warm-start test whose first process never runs backward, run as a subprocess.

    python forward_only.py NAME compile|compile-at-exit|load STORE OUT_JSON

The models' parameters require grad and grad mode is on, so torch.compile
builds training graphs: the forward is compiled at once, the backward only
when backward first runs. The first side (`compile`, or `compile-at-exit`
saving at interpreter exit) only runs forward; `load` runs the same in a
fresh process, and for `backward` then runs backward too. Writes the outputs
(OUT_JSON.pt) and the counters (OUT_JSON) as tests/programs/scenario.py does.
"""

from __future__ import annotations

import ast
import copy
import json
import os
import pathlib
import sys

import torch

import precompile

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
README_STORE = "/var/cache/precompile"
LATER = "# Any later process"


class MyModel(torch.nn.Module):
    """What the README's sample calls `MyModel`: plain layers, parameters requiring grad."""

    def __init__(self) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(16, 32)
        self.l2 = torch.nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.relu(self.l1(x)))


def _readme_sample() -> str:
    """The README's first Python block."""
    text = README.read_text()
    start = text.index("```python\n") + len("```python\n")
    return text[start : text.index("```", start)]


class _Capture(ast.NodeTransformer):
    """The sample, with its store path replaced and each expression statement's value kept."""

    def __init__(self, store: str) -> None:
        self.store = store

    def visit_Constant(self, node: ast.Constant) -> ast.Constant:
        if node.value == README_STORE:
            return ast.copy_location(ast.Constant(self.store), node)
        return node

    def visit_Expr(self, node: ast.Expr) -> ast.stmt:
        self.generic_visit(node)
        call = ast.parse("_values.append(None)").body[0]
        assert isinstance(call, ast.Expr) and isinstance(call.value, ast.Call)
        call.value.args = [node.value]
        return ast.copy_location(call, node)


def readme(mode: str, store: str) -> list[torch.Tensor]:
    """The README's sample as written: its first process, or any later one."""
    lines = _readme_sample().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if line.startswith(LATER))
    first, later = ast.parse("".join(lines[:cut])), ast.parse("".join(lines[cut:]))
    # A later process runs the sample's imports, then its last lines.
    imports = [node for node in first.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    later.body = imports + later.body
    tree = _Capture(store).visit(first if mode.startswith("compile") else later)
    ast.fix_missing_locations(tree)
    # The sample's `install()` takes the default store: this test's, here.
    os.environ["PRECOMPILE_STORE"] = store
    values: list[object] = []
    namespace = {"MyModel": MyModel, "example_input": torch.randn(4, 16), "_values": values}
    exec(compile(tree, str(README), "exec"), namespace)
    return [v for v in values if isinstance(v, torch.Tensor)]


def shapes(mode: str, store: str) -> list[torch.Tensor]:
    """Forward only, at several batch sizes: a static graph, then a dynamic one."""
    precompile.install(store, save_on_exit=mode == "compile-at-exit")
    model = torch.compile(MyModel())
    return [model(torch.randn(n, 16)) for n in (2, 3, 5, 9)]


def backward(mode: str, store: str) -> list[torch.Tensor]:
    """Forward only in the first process; `load` also runs backward, twice,
    the first keeping its graph, and returns the gradients with eager's."""
    precompile.install(store, save_on_exit=mode == "compile-at-exit")
    model = MyModel()
    eager = copy.deepcopy(model)
    x = torch.randn(4, 16)
    out = torch.compile(model)(x)
    if mode.startswith("compile"):
        return [out]
    expected = eager(x)
    for result in (out, expected):
        result.pow(2).sum().backward(retain_graph=True)
        result.pow(2).sum().backward()
    grads = [p.grad for p in model.parameters()]
    eager_grads = [p.grad for p in eager.parameters()]
    assert all(g is not None for g in grads + eager_grads)
    return [out, expected, *grads, *eager_grads]


SCENARIOS = {"readme": readme, "shapes": shapes, "backward": backward}


def main() -> None:
    name, mode, store, out_path = sys.argv[1:5]
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    outputs = SCENARIOS[name](mode, store)
    report = None
    if mode == "compile" and name != "readme":  # the README's sample saves for itself
        r = precompile.save()
        report = {"entries": r.entries, "backends": r.backends, "missing_backends": r.missing_backends}
    torch.save([o.detach() for o in outputs], out_path + ".pt")
    with open(out_path, "w") as f:
        json.dump({"counters": {k: dict(v) for k, v in counters.items()}, "report": report}, f)


if __name__ == "__main__":
    main()
