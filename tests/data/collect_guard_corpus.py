"""Collect a corpus of real torch guard expressions for tests/test_guards.py.

What it does:

1. Runs small ``torch.compile(..., dynamic=True)`` / ``mark_dynamic`` workloads
   (size arithmetic, views with products and floor division, slicing with
   offsets, cat, min/max, pad, unfold, chunk/split, conditionals on sizes,
   specialisation, conv/pool/interpolate output sizes, ...) with
   ``TORCHINDUCTOR_CACHE_DIR`` in a temporary directory, while hooking
   ``ShapeEnv.produce_guards_expression`` (what FxGraphCache and
   AOTAutogradCache call to make ``guards_expr``) and
   ``ShapeEnv.evaluate_guards_expression`` (called on cache hits).  Every
   workload is run twice -- the second time after ``torch._dynamo.reset()``
   with other sizes -- so cache lookups evaluate the stored guards too.
2. Builds a few guards over *tensor* placeholders directly with a ShapeEnv and
   FakeTensorMode (``L['t0'].size()[0]``, ``.stride()``, ``.storage_offset()``).
3. Adds hand-written expressions in the printer's syntax that cover every
   function and operator the evaluator allows.
4. For each expression builds several argument vectors (the original hints
   plus perturbations: +1, -1, doubled, 0/1 edge values, one-at-a-time
   changes) and records what torch's own
   ``ShapeEnv().evaluate_guards_expression(expr, args)`` returns (or raises).

Run from the repository root:  python tests/data/collect_guard_corpus.py
Writes tests/data/guard_corpus.json (kept well under 200 KB).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "guard_corpus.json"
MAX_BYTES = 200_000
MAX_VECTORS = 14

# Must be set before torch is imported so no real cache directory is touched.
_CACHE_DIR = tempfile.mkdtemp(prefix="guard-corpus-")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = _CACHE_DIR
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
warnings.filterwarnings("ignore")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.fx.experimental.symbolic_shapes import ShapeEnv  # noqa: E402

# ---------------------------------------------------------------------------
# Hooks
# ---------------------------------------------------------------------------

# expr -> {"origins": set[str], "hints": list[list]}
COLLECTED: dict[str, dict[str, Any]] = {}
_current = ["?"]


def _hint(v: Any) -> Any:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return v
    if isinstance(v, (torch.SymInt, torch.SymFloat)):
        node = v.node
        if getattr(node, "hint", None) is not None:
            return node.hint
        from torch.fx.experimental import symbolic_shapes as ss

        for fn_name in ("guarding_hint_or_throw", "hint_int"):
            fn = getattr(ss, fn_name, None)
            if fn is not None:
                try:
                    return fn(v)
                except Exception:
                    pass
    return None


def _record(expr: str, origin: str, hints: list[Any] | None) -> None:
    entry = COLLECTED.setdefault(expr, {"origins": set(), "hints": []})
    entry["origins"].add(origin)
    if hints is not None and hints not in entry["hints"]:
        entry["hints"].append(hints)


_orig_produce = ShapeEnv.produce_guards_expression
_orig_evaluate = ShapeEnv.evaluate_guards_expression


def _produce_hook(self: ShapeEnv, placeholders: Any, *args: Any, **kwargs: Any) -> Any:
    result = _orig_produce(self, placeholders, *args, **kwargs)
    if result:
        hints = [_hint(p) for p in placeholders]
        _record(result, f"compile:{_current[0]}", None if None in hints else hints)
    return result


def _evaluate_hook(self: ShapeEnv, code: str, args: Any) -> Any:
    concrete = [a for a in args if type(a) in (int, float)]
    if len(concrete) == len(args):
        _record(code, f"cache-hit:{_current[0]}", list(args))
    return _orig_evaluate(self, code, args)


# ---------------------------------------------------------------------------
# Compile workloads: (name, fn, first inputs, second inputs, how to mark)
# ---------------------------------------------------------------------------


def w_view_floordiv(x: torch.Tensor) -> torch.Tensor:
    return x.view(-1, x.shape[0] // 2).sum(1)


def w_reshape_product(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1) * y


def w_slice_offsets(x: torch.Tensor) -> torch.Tensor:
    return x[2:-3] * 2


def w_slice_div(x: torch.Tensor) -> torch.Tensor:
    return x[x.shape[0] // 3 :].cos()


def w_cat_view(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.cat([x, y]).view(2, -1)


def w_builtin_min(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    n = min(x.shape[0], y.shape[0])
    return x[:n] + y[:n]


def w_sym_min_max(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    n = torch.sym_min(x.shape[0], y.shape[0])
    m = torch.sym_max(x.shape[0], y.shape[0])
    return (x[:n] + y[:n]).sum() + torch.ones(m).sum()


def w_pad_view(x: torch.Tensor) -> torch.Tensor:
    return F.pad(x, (1, 2)).view(-1, 3)


def w_unfold(x: torch.Tensor) -> torch.Tensor:
    return x.unfold(0, 3, 2).sum(-1)


def w_chunk(x: torch.Tensor) -> list[torch.Tensor]:
    return [c * i for i, c in enumerate(x.chunk(3))]


def w_split(x: torch.Tensor) -> list[torch.Tensor]:
    return [c + 1 for c in torch.split(x, 4)]


def w_cond_ge(x: torch.Tensor) -> torch.Tensor:
    return x * 2 if x.shape[0] >= 3 else x - 1


def w_cond_mod(x: torch.Tensor) -> torch.Tensor:
    return x.view(2, -1).sum(0) if x.shape[0] % 2 == 0 else x - 1


def w_specialize(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if x.shape[0] == 5:
        return x * 3 + y.sum()
    return x + y.sum()


def w_int_arg(x: torch.Tensor, n: int) -> torch.Tensor:
    return x.view(n, -1) * n


def w_conv(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.conv1d(x, w, stride=2, padding=1)


def w_maxpool_ceil(x: torch.Tensor) -> torch.Tensor:
    return F.max_pool1d(x, 3, 2, ceil_mode=True)


def w_interpolate(x: torch.Tensor) -> torch.Tensor:
    return F.interpolate(x, scale_factor=1.5, mode="nearest")


def w_narrow_stride(x: torch.Tensor) -> torch.Tensor:
    y = x.narrow(0, 1, x.shape[0] - 2)
    return y.as_strided((y.shape[0] // 2, 2), (2, 1)).sum(1)


def w_repeat_transpose(x: torch.Tensor) -> torch.Tensor:
    return x.t().reshape(-1).repeat(2).view(x.shape[1], -1)


def w_arange_int(x: torch.Tensor, n: int) -> torch.Tensor:
    return x[: n * 2] + torch.arange(n * 2)


def w_sqrt_size(x: torch.Tensor) -> torch.Tensor:
    k = int(math.sqrt(x.shape[0]))
    return x[: k * k].view(k, k).sum(0)


def w_mark_dynamic_range(x: torch.Tensor) -> torch.Tensor:
    return x[1:].relu() * (x.shape[0] // 3)


def w_flatten_view(x: torch.Tensor) -> torch.Tensor:
    return x.view(-1, 2 * x.shape[1]).sum(0)


def w_pad_reflect(x: torch.Tensor) -> torch.Tensor:
    return F.pad(x, (2, 2), mode="reflect")


def w_ceil_div(x: torch.Tensor) -> torch.Tensor:
    n = -(-x.shape[0] // 4)
    return x.new_zeros(n) + x[:n]


def w_trunc_float(x: torch.Tensor) -> torch.Tensor:
    return x[: int(x.shape[0] * 0.5)] * 2


def w_clamp_start(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    start = max(0, x.shape[0] - y.shape[0])
    return x[start:] + y[: x.shape[0] - start]


def w_topk(x: torch.Tensor) -> torch.Tensor:
    return x.topk(min(3, x.shape[0] - 1)).values


def w_square_reshape(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(x.shape[0] ** 2).cumsum(0)


class TinyModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        y = self.lin(x).relu()
        return y.view(b // 2, -1).sum(0)


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def _workloads() -> list[tuple[str, Callable[..., Any], Callable[[], tuple], Callable[[], tuple], str]]:
    torch.manual_seed(0)
    w3 = _r(2, 1, 3)
    model = TinyModel()
    return [
        ("view_floordiv", w_view_floordiv, lambda: (_r(6),), lambda: (_r(10),), "dynamic"),
        ("reshape_product", w_reshape_product, lambda: (_r(3, 4), _r(12)), lambda: (_r(5, 2), _r(10)), "dynamic"),
        ("slice_offsets", w_slice_offsets, lambda: (_r(9),), lambda: (_r(12),), "dynamic"),
        ("slice_div", w_slice_div, lambda: (_r(9),), lambda: (_r(14),), "dynamic"),
        ("cat_view", w_cat_view, lambda: (_r(5), _r(7)), lambda: (_r(3), _r(9)), "dynamic"),
        ("builtin_min", w_builtin_min, lambda: (_r(5), _r(7)), lambda: (_r(4), _r(9)), "dynamic"),
        ("sym_min_max", w_sym_min_max, lambda: (_r(5), _r(7)), lambda: (_r(8), _r(6)), "dynamic"),
        ("pad_view", w_pad_view, lambda: (_r(6),), lambda: (_r(9),), "dynamic"),
        ("unfold", w_unfold, lambda: (_r(9),), lambda: (_r(12),), "dynamic"),
        ("chunk", w_chunk, lambda: (_r(10),), lambda: (_r(13),), "dynamic"),
        ("split", w_split, lambda: (_r(10),), lambda: (_r(17),), "dynamic"),
        ("cond_ge", w_cond_ge, lambda: (_r(5),), lambda: (_r(2),), "dynamic"),
        ("cond_mod", w_cond_mod, lambda: (_r(6),), lambda: (_r(7),), "dynamic"),
        ("specialize", w_specialize, lambda: (_r(5), _r(4)), lambda: (_r(6), _r(3)), "dynamic"),
        ("int_arg", w_int_arg, lambda: (_r(12), 3), lambda: (_r(20), 4), "dynamic"),
        ("conv1d", w_conv, lambda: (_r(1, 1, 11), w3), lambda: (_r(1, 1, 16), w3), "mark0:2"),
        ("maxpool_ceil", w_maxpool_ceil, lambda: (_r(1, 2, 10),), lambda: (_r(1, 2, 13),), "mark0:2"),
        ("interpolate", w_interpolate, lambda: (_r(1, 1, 6),), lambda: (_r(1, 1, 9),), "mark0:2"),
        ("narrow_stride", w_narrow_stride, lambda: (_r(10),), lambda: (_r(14),), "dynamic"),
        ("repeat_transpose", w_repeat_transpose, lambda: (_r(3, 4),), lambda: (_r(2, 5),), "dynamic"),
        ("arange_int", w_arange_int, lambda: (_r(12), 3), lambda: (_r(20), 5), "dynamic"),
        ("sqrt_size", w_sqrt_size, lambda: (_r(10),), lambda: (_r(17),), "dynamic"),
        ("mark_dynamic_range", w_mark_dynamic_range, lambda: (_r(16),), lambda: (_r(24),), "mark0:0:4:64"),
        ("flatten_view", w_flatten_view, lambda: (_r(6, 3),), lambda: (_r(8, 5),), "dynamic"),
        ("pad_reflect", w_pad_reflect, lambda: (_r(1, 7),), lambda: (_r(1, 11),), "dynamic"),
        ("ceil_div", w_ceil_div, lambda: (_r(10),), lambda: (_r(17),), "dynamic"),
        ("trunc_float", w_trunc_float, lambda: (_r(10),), lambda: (_r(15),), "dynamic"),
        ("clamp_start", w_clamp_start, lambda: (_r(9), _r(4)), lambda: (_r(5), _r(7)), "dynamic"),
        ("topk", w_topk, lambda: (_r(9),), lambda: (_r(3),), "dynamic"),
        ("square_reshape", w_square_reshape, lambda: (_r(3, 3),), lambda: (_r(5, 5),), "dynamic"),
        ("tiny_model", model, lambda: (_r(6, 8),), lambda: (_r(10, 8),), "mark0:0"),
    ]


def _mark(inputs: tuple, how: str) -> None:
    # "mark0:<dim>[:min:max]": mark that dim of the first input dynamic.
    parts = how.split(":")
    dim = int(parts[1])
    if len(parts) == 4:
        torch._dynamo.mark_dynamic(inputs[0], dim, min=int(parts[2]), max=int(parts[3]))
    else:
        torch._dynamo.maybe_mark_dynamic(inputs[0], dim)


def run_compile_workloads(only: set[str] | None) -> None:
    for name, fn, first, second, how in _workloads():
        if only and name not in only:
            continue
        _current[0] = name
        t0 = time.time()
        try:
            for make in (first, second):
                torch._dynamo.reset()
                inputs = make()
                if how == "dynamic":
                    compiled = torch.compile(fn, dynamic=True)
                else:
                    _mark(inputs, how)
                    compiled = torch.compile(fn)
                compiled(*inputs)
        except Exception:
            print(f"[collect] workload {name} failed:", file=sys.stderr)
            traceback.print_exc()
        print(f"[collect] {name}: {time.time() - t0:.1f}s, {len(COLLECTED)} expressions so far", file=sys.stderr)


# ---------------------------------------------------------------------------
# Tensor-placeholder guards, straight from a ShapeEnv
# ---------------------------------------------------------------------------


def _tensor_spec(t: torch.Tensor) -> dict[str, Any]:
    return {"tensor": {"size": list(t.shape), "stride": list(t.stride()), "offset": t.storage_offset()}}


def build_tensor(spec: dict[str, Any]) -> torch.Tensor:
    """Materialise {"tensor": {size, stride, offset}} as a real CPU tensor."""
    size, stride, offset = spec["size"], spec["stride"], spec["offset"]
    extent = offset + sum((s - 1) * st for s, st in zip(size, stride) if s > 0) + 1
    return torch.zeros(max(extent, 1)).as_strided(size, stride, offset)


def run_shape_env_workloads() -> list[tuple[str, list[list[Any]]]]:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

    out: list[tuple[str, list[list[Any]]]] = []

    def fake(mode: Any, t: torch.Tensor) -> Any:
        ctx: Any = StatelessSymbolicContext(
            dynamic_sizes=[DimDynamic.DYNAMIC] * t.dim(),
            dynamic_strides=[DimDynamic.INFER_STRIDE] * t.dim(),
        )
        return mode.from_tensor(t, symbolic_context=ctx)

    def scenario(make: Callable[[], tuple], body: Callable[..., Any], variants: list[tuple]) -> None:
        env = ShapeEnv()
        mode = FakeTensorMode(shape_env=env)
        reals = make()
        fakes = [fake(mode, t) for t in reals]
        with mode:
            body(*fakes)
        for ignore_static in (True, False):
            expr = env.produce_guards_expression(fakes, ignore_static=ignore_static)
            if expr:
                vectors = [[_tensor_spec(t) for t in reals]]
                vectors += [[_tensor_spec(t) for t in v] for v in variants]
                out.append((expr, vectors))

    def body_add_reshape(a: Any, b: Any) -> None:
        _ = a + b
        if a.shape[0] > 5:
            _ = a.reshape(-1, 2)

    scenario(
        lambda: (_r(6, 4), _r(4, 6).t()),
        body_add_reshape,
        [
            (_r(8, 4), _r(4, 8).t()),
            (_r(5, 4), _r(4, 5).t()),
            (_r(6, 4), _r(6, 4)),
            (_r(7, 3), _r(3, 7).t()),
            (_r(10, 4)[2:8], _r(4, 6).t()),
            (_r(6, 1), _r(1, 6).t()),
        ],
    )

    def body_cat_slice(a: Any, b: Any) -> None:
        c = torch.cat([a, b], dim=1)
        _ = c[:, 1:].reshape(-1)
        if a.shape[1] * 2 > b.shape[1]:
            _ = a.sum()

    scenario(
        lambda: (_r(3, 4), _r(3, 5)),
        body_cat_slice,
        [
            (_r(3, 2), _r(3, 5)),
            (_r(4, 4), _r(3, 5)),
            (_r(3, 6), _r(3, 2)),
            (_r(3, 4)[:, :3], _r(3, 5)),
            (_r(2, 9), _r(2, 1)),
        ],
    )
    return out


# ---------------------------------------------------------------------------
# Hand-written expressions in the printer's syntax
# ---------------------------------------------------------------------------

INT_GRID = [[-3, 2], [-1, -1], [0, 0], [0, 1], [1, 0], [2, 3], [3, 2], [5, 5], [7, -2], [10, 4], [64, 3]]
FLOAT_GRID = [[0.0], [0.5], [-1.5], [2.0], [3.25], [10.0], [math.nan], [math.inf], [-math.inf], [-0.0]]

HAND: list[tuple[str, list[list[Any]]]] = [
    ("L['t0'] + L['t1'] - 3*L['t0'] == -L['t1'] + -2*L['t0'] + 2*L['t1']", INT_GRID),
    ("L['t0'] / L['t1'] > 1.5", INT_GRID),
    ("(L['t0'] // L['t1']) == -2 or (L['t0'] // L['t1']) == 1", INT_GRID),
    ("(L['t0'] % L['t1']) == 1", INT_GRID),
    ("L['t0']**2 <= 100 and 2**L['t1'] < 1000", INT_GRID),
    ("L['t0']**-1 < 0.5", INT_GRID),
    ("L['t0']**L['t1'] == 1", INT_GRID),
    ("(L['t0'] & 3) == 0 or ((L['t0'] | L['t1']) ^ 5) > 2", INT_GRID),
    ("not (L['t0'] >= 3) and +L['t1'] != 0", INT_GRID),
    ("0 <= L['t0'] < L['t1'] <= 100", INT_GRID),
    ("1 < L['t0'] != L['t1'] > 2", INT_GRID),
    ("math.floor(L['t0'] / 3) == math.ceil(L['t0'] / 3) - 1", INT_GRID),
    ("math.floor(-L['t0'] / 2) == -L['t0'] // 2 and math.trunc(-L['t0'] / 2) == -(L['t0'] // 2)", INT_GRID),
    ("math.sqrt(L['t0']) >= 2", INT_GRID),
    ("torch._sym_sqrt(torch.sym_float(L['t0'])) < 3.0", INT_GRID),
    ("abs(L['t0'] - L['t1']) <= 2", INT_GRID),
    ("max(L['t0'], L['t1'], 4) == 4 or min(L['t0'], L['t1']) >= 2", INT_GRID),
    ("torch.sym_max(L['t0'], torch.sym_max(L['t1'], 3)) == 5", INT_GRID),
    ("torch.sym_min(L['t0'], torch.sym_float(L['t1'])) == 2", INT_GRID),
    ("round(L['t0'] / 2) == 2 or round(L['t0'] / 3, 2) == 0.67", INT_GRID),
    ("round(L['t0'] / 4) + L['t1'] == 1", INT_GRID),
    ("(1 if L['t0'] > 2 else (2 if L['t1'] > 2 else 0)) + L['t1'] == 3", INT_GRID),
    ("IsNonOverlappingAndDenseIndicator(L['t0'], L['t1'], L['t1'], 1) == 1", INT_GRID),
    ("IsNonOverlappingAndDenseIndicator(L['t0'], L['t1']) != 0", INT_GRID),
    ("cast_symbool_to_symint_guardless(L['t0'] == 2) + L['t1'] == 4", INT_GRID),
    ("((L['t0'] // 4) % 8) == 3 or ((L['t1'] // 2) % 3) == 1", INT_GRID),
    ("True and L['t0']", INT_GRID),
    ("L['t0'] or False", INT_GRID),
    ("L['t0']*1.5 == 3.0 or L['t1'] == 2.0", INT_GRID),
    ("L['t0']*L['t0']*L['t0']*L['t0']*L['t1'] > 2**62", [[2**20, 2**3], [2**15, 1], [-(2**16), -3], [7, 7]]),
    ("not math.isnan(L['t0']) and L['t0'] < math.inf and L['t0'] > -math.inf", FLOAT_GRID),
    ("math.floor(L['t0']) == math.ceil(L['t0'])", FLOAT_GRID),
    ("math.cos(L['t0']) < 0.5 and math.sin(L['t0']) > -0.9 and math.tan(L['t0']) != 1", FLOAT_GRID),
    ("math.cosh(L['t0']) > 2 or math.sinh(L['t0']) < -1 or math.tanh(L['t0']) > 0.9", FLOAT_GRID),
    ("math.acos(L['t0']) > 1 or math.asin(L['t0']) > 0.1 or math.atan(L['t0']) > 1", FLOAT_GRID),
    ("math.log2(L['t0']) >= 1", FLOAT_GRID),
    ("math.trunc(L['t0']) == round(L['t0'])", FLOAT_GRID),
    ("torch.sym_max(L['t0'], 1) == 1.0", FLOAT_GRID),
    ("L['t0'] // 1.5 == 1 and L['t0'] % 1.5 > 0.4", FLOAT_GRID),
    ("-math.inf < 1 / L['t0'] < math.inf", FLOAT_GRID),
    (
        "L['t0'] <= 9223372036854775807 and L['t0'] * L['t1'] >= -9223372036854775808",
        [[2**62, 2], [2**63, 1], [-(2**62), 2], [-(2**62), -3], [5, 7]],
    ),
    ("L['t0'] == math.nan or L['t0'] != math.nan", FLOAT_GRID),
    # and/or yield the deciding operand, not a bool; & exposes its type.
    (
        "((L['t0'] and 5) & 1) == 0 or ((L['t1'] or 2) & 1) == 1",
        [[0.0, 0], [0, 0], [0, 0.0], [1, 1.5], [2, 3], [2.5, 1], [-0.0, 0]],
    ),
    (
        "L['t0'] and L['t1'] or not L['t2']",
        [[True, False, True], [True, True, False], [False, True, True], [1, 0, 0], [0, 2, 1]],
    ),
    ("(L['t0'] + L['t1']) // (L['t2'] - 1) >= 0", [[1, 2, 3], [4, 5, 1], [-5, 2, 0], [0, 0, 2], [9, -20, 4]]),
]


# ---------------------------------------------------------------------------
# Argument vectors and torch's verdicts
# ---------------------------------------------------------------------------


def perturb(hints: list[Any], rng: random.Random) -> list[list[Any]]:
    """Original hints plus deterministic perturbations (ints only are perturbed)."""
    n = len(hints)
    vecs = [list(hints)]
    if not all(type(h) is int for h in hints):
        return vecs

    def add(v: list[int]) -> None:
        if v not in vecs:
            vecs.append(v)

    add([h + 1 for h in hints])
    add([h - 1 for h in hints])
    add([2 * h for h in hints])
    add([0] * n)
    add([1] * n)
    add([2] * n)
    for i in range(n):
        for delta in (1, -1):
            v = list(hints)
            v[i] += delta
            add(v)
    for i in range(n):
        for edge in (0, 1):
            v = list(hints)
            v[i] = edge
            add(v)
    top = max([abs(h) for h in hints] + [4])
    for _ in range(3):
        add([rng.randint(0, 2 * top + 2) for _ in range(n)])
    # Keep the handful most informative: originals and global moves first.
    return vecs[:MAX_VECTORS]


def encode_arg(a: Any) -> Any:
    if isinstance(a, dict):
        return a
    if type(a) is float and not math.isfinite(a):
        return {"float": repr(a)}
    return a


def decode_arg(a: Any) -> Any:
    if isinstance(a, dict):
        if "float" in a:
            return float(a["float"])
        if "tensor" in a:
            return build_tensor(a["tensor"])
    return a


def torch_verdict(expr: str, args: list[Any]) -> dict[str, Any]:
    real = [decode_arg(encode_arg(a)) for a in args]
    try:
        result = ShapeEnv().evaluate_guards_expression(expr, real)
    except Exception as e:  # record what torch raised, by type
        return {"args": [encode_arg(a) for a in args], "error": type(e).__name__}
    return {"args": [encode_arg(a) for a in args], "result": bool(result)}


def dump_corpus(corpus: dict[str, Any]) -> str:
    """JSON with one evaluation per line: compact, yet diffable."""

    def j(v: Any) -> str:
        return json.dumps(v, allow_nan=False)

    lines = ["{"]
    for key in ("description", "torch_version", "python_version"):
        lines.append(f" {j(key)}: {j(corpus[key])},")
    lines.append(' "cases": [')
    for i, case in enumerate(corpus["cases"]):
        lines.append(f'  {{"expr": {j(case["expr"])},')
        lines.append(f'   "origin": {j(case["origin"])},')
        lines.append('   "evals": [')
        evals = [f"    {j(e)}" for e in case["evals"]]
        lines.append(",\n".join(evals))
        lines.append("   ]}" + ("," if i + 1 < len(corpus["cases"]) else ""))
    lines.append(" ]")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    assert json.loads(text) == corpus
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--only", nargs="*", help="run only these compile workloads")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile workloads")
    opts = parser.parse_args()

    ShapeEnv.produce_guards_expression = _produce_hook  # type: ignore[method-assign]
    ShapeEnv.evaluate_guards_expression = _evaluate_hook  # type: ignore[method-assign]
    try:
        if not opts.no_compile:
            run_compile_workloads(set(opts.only) if opts.only else None)
    finally:
        ShapeEnv.produce_guards_expression = _orig_produce  # type: ignore[method-assign]
        ShapeEnv.evaluate_guards_expression = _orig_evaluate  # type: ignore[method-assign]

    rng = random.Random(1234)
    cases: list[dict[str, Any]] = []
    for expr in sorted(COLLECTED):
        entry = COLLECTED[expr]
        vectors: list[list[Any]] = []
        for hints in entry["hints"]:
            for v in perturb(hints, rng):
                if v not in vectors:
                    vectors.append(v)
        if not vectors:
            print(f"[collect] no hints for {expr!r}; skipped", file=sys.stderr)
            continue
        cases.append(
            {
                "expr": expr,
                "origin": sorted(entry["origins"]),
                "evals": [torch_verdict(expr, v) for v in vectors[: MAX_VECTORS + 4]],
            }
        )
    for expr, vectors in run_shape_env_workloads():
        if any(c["expr"] == expr for c in cases):
            continue
        cases.append(
            {"expr": expr, "origin": ["shape_env:tensors"], "evals": [torch_verdict(expr, v) for v in vectors]}
        )
    for expr, vectors in HAND:
        cases.append({"expr": expr, "origin": ["hand"], "evals": [torch_verdict(expr, v) for v in vectors]})

    corpus = {
        "description": "Guard expressions with torch's own ShapeEnv.evaluate_guards_expression "
        "verdicts; generated by tests/data/collect_guard_corpus.py",
        "torch_version": torch.__version__,
        "python_version": sys.version.split()[0],
        "cases": cases,
    }
    text = dump_corpus(corpus)
    if len(text.encode()) > MAX_BYTES:
        print(f"[collect] corpus is {len(text)} bytes (> {MAX_BYTES}); trim it", file=sys.stderr)
        return 1
    opts.out.write_text(text)
    n_compile = sum(1 for c in cases if any(o.startswith(("compile:", "cache-hit:")) for o in c["origin"]))
    n_evals = sum(len(c["evals"]) for c in cases)
    print(
        f"[collect] wrote {opts.out}: {len(cases)} expressions ({n_compile} from torch.compile), "
        f"{n_evals} evaluations, {len(text)} bytes",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
