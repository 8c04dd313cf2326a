"""Tests for precompile.guards: eval-free evaluation of torch guard expressions.

The corpus (tests/data/guard_corpus.json, made by
tests/data/collect_guard_corpus.py) holds guard expressions that real
torch.compile runs produced, plus hand-written ones covering every allowed
function/operator, each with torch's own ShapeEnv.evaluate_guards_expression
verdicts.  Every verdict must be reproduced exactly, and -- torch being
installed -- re-checked against the live torch too.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import math
import pickle
import random
import subprocess
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

# Pure Python, but the verdicts are re-checked against the installed torch's
# ShapeEnv: it runs with every supported torch.
pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parents[1]
GUARDS_DIR = ROOT / "python" / "precompile" / "guards"
CORPUS_PATH = ROOT / "tests" / "data" / "guard_corpus.json"


def _load_guards() -> ModuleType:
    # Prefer the installed/importable package; fall back to python/ on the
    # path; and if the package __init__ needs the (unbuilt) Rust extension,
    # load the guards package on its own -- it imports nothing else from
    # precompile.
    try:
        return importlib.import_module("precompile.guards")
    except ImportError:
        pass
    python_dir = str(ROOT / "python")
    if python_dir not in sys.path:
        sys.path.insert(0, python_dir)
    try:
        return importlib.import_module("precompile.guards")
    except ImportError:
        name = "_precompile_guards_standalone"
        spec = importlib.util.spec_from_file_location(
            name, GUARDS_DIR / "__init__.py", submodule_search_locations=[str(GUARDS_DIR)]
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module


guards = _load_guards()
Guard = guards.Guard
GuardSyntaxError = guards.GuardSyntaxError
GuardEvaluationError = guards.GuardEvaluationError
compile_guard = guards.compile_guard
evaluate_guard = guards.evaluate_guard
select = guards.select

CORPUS: dict[str, Any] = json.loads(CORPUS_PATH.read_text())
CASES: list[dict[str, Any]] = CORPUS["cases"]


def _case_id(case: dict[str, Any]) -> str:
    return f"{case['origin'][0]}:{case['expr'][:40]}"


@pytest.fixture(scope="module")
def torch() -> ModuleType:
    # torch is optional for the package; the corpus checks that need tensors or
    # the live ShapeEnv skip without it.  Importing it without numpy warns
    # once at import time, which filterwarnings=error would turn into a failure.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
        return pytest.importorskip("torch")


def _needs_tensors(case: dict[str, Any]) -> bool:
    return any(isinstance(a, dict) and "tensor" in a for e in case["evals"] for a in e["args"])


def _decode(arg: Any, torch: ModuleType | None) -> Any:
    if isinstance(arg, dict):
        if "float" in arg:
            return float(arg["float"])
        if "tensor" in arg:
            assert torch is not None
            spec = arg["tensor"]
            size, stride, offset = spec["size"], spec["stride"], spec["offset"]
            extent = offset + sum((s - 1) * st for s, st in zip(size, stride) if s > 0) + 1
            return torch.zeros(max(extent, 1)).as_strided(size, stride, offset)
        raise AssertionError(f"unknown encoded argument {arg!r}")
    return arg


def _ours(expr: str, args: list[Any]) -> tuple[str, Any]:
    try:
        return "result", evaluate_guard(expr, args)
    except (GuardEvaluationError, GuardSyntaxError) as e:
        return "error", e


def _live_torch(torch: ModuleType, expr: str, args: list[Any]) -> tuple[str, Any]:
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    try:
        return "result", bool(ShapeEnv().evaluate_guards_expression(expr, args))
    except Exception as e:
        return "error", e


def _torch_has_flat_is_non_overlapping(torch: ModuleType) -> bool:
    # Older torch releases bound IsNonOverlappingAndDenseIndicator in
    # SYMPY_INTERP to a (sizes, strides) function although the printer emits
    # flat arguments, so torch itself could not evaluate such guards; we
    # implement the fixed, flat form.
    from torch.fx.experimental import symbolic_shapes

    fn = symbolic_shapes.SYMPY_INTERP["IsNonOverlappingAndDenseIndicator"]
    return "flat" in getattr(fn, "__name__", "")


# ---------------------------------------------------------------------------
# Corpus
# ---------------------------------------------------------------------------


def test_corpus_is_substantial() -> None:
    exprs = {c["expr"] for c in CASES}
    assert len(exprs) == len(CASES), "duplicate expressions in the corpus"
    from_compile = [c for c in CASES if any(o.startswith(("compile:", "cache-hit:")) for o in c["origin"])]
    assert len(from_compile) >= 25
    assert len(exprs) >= 30
    assert CORPUS_PATH.stat().st_size < 200_000
    verdicts = [e for c in CASES for e in c["evals"]]
    # Both outcomes and torch-side errors must be represented, or the
    # comparison below could pass vacuously.
    assert sum(1 for e in verdicts if e.get("result") is True) >= 100
    assert sum(1 for e in verdicts if e.get("result") is False) >= 100
    assert sum(1 for e in verdicts if "error" in e) >= 10
    # Real compiles produced the interesting shapes we want covered.
    joined = "\n".join(c["expr"] for c in from_compile)
    for needle in ("//", "%", "torch.sym_max", "torch.sym_min", "math.trunc", "torch.sym_float", "!="):
        assert needle in joined, needle


def test_corpus_covers_every_allowed_function() -> None:
    joined = "\n".join(c["expr"] for c in CASES)
    for name in guards._functions._FUNCTIONS:
        if name == "torch.sym_sqrt":  # alias missing from older torch; unit-tested below
            continue
        assert f"{name}(" in joined, f"no corpus case calls {name}"
    for op in (
        " + ",
        " - ",
        "*",
        " / ",
        " // ",
        " % ",
        "**",
        " & ",
        " | ",
        " ^ ",
        "not ",
        " and ",
        " or ",
        " == ",
        " != ",
        " < ",
        " <= ",
        " > ",
        " >= ",
        " if ",
        "math.inf",
        "math.nan",
        ".size()[",
        ".stride()[",
        ".storage_offset()",
    ):
        assert op in joined, f"no corpus case uses {op!r}"


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_corpus_case_matches_recorded_torch_verdict(case: dict[str, Any], request: pytest.FixtureRequest) -> None:
    torch_mod = request.getfixturevalue("torch") if _needs_tensors(case) else None
    guard = compile_guard(case["expr"])
    assert guard.source == case["expr"]
    for ev in case["evals"]:
        args = [_decode(a, torch_mod) for a in ev["args"]]
        kind, value = _ours(case["expr"], args)
        if "error" in ev:
            assert kind == "error", f"torch raised {ev['error']} for {ev['args']}, we returned {value}"
            assert isinstance(value, GuardEvaluationError)
            # Arithmetic failures carry the original exception's type name.
            assert ev["error"] in str(value), (ev["error"], str(value))
        else:
            assert kind == "result", f"torch returned {ev['result']} for {ev['args']}, we raised {value!r}"
            assert value is ev["result"], f"args {ev['args']}: torch {ev['result']}, ours {value}"


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_corpus_case_matches_live_torch(case: dict[str, Any], torch: ModuleType) -> None:
    if "IsNonOverlappingAndDenseIndicator" in case["expr"] and not _torch_has_flat_is_non_overlapping(torch):
        pytest.skip("this torch cannot evaluate flat IsNonOverlappingAndDenseIndicator guards")
    vectors = [[_decode(a, torch) for a in ev["args"]] for ev in case["evals"]]
    # Beyond the recorded vectors, probe fresh random integer ones.
    if all(type(a) is int for v in vectors for a in v) and vectors and vectors[0]:
        rng = random.Random(case["expr"])
        top = max(abs(a) for v in vectors for a in v) + 3
        for _ in range(8):
            vectors.append([rng.randint(-2, top) for _ in vectors[0]])
    for args in vectors:
        theirs = _live_torch(torch, case["expr"], args)
        ours = _ours(case["expr"], args)
        assert ours[0] == theirs[0], f"args {args}: torch {theirs}, ours {ours}"
        if ours[0] == "result":
            assert ours[1] is theirs[1], f"args {args}: torch {theirs[1]}, ours {ours[1]}"


# ---------------------------------------------------------------------------
# Semantics (no torch needed)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "args", "expected"),
    [
        ("-7 // 2 == -4 and -7 % 2 == 1 and 7 // -2 == -4 and 7 % -2 == -1", [], True),
        ("7 / 2 == 3.5 and 6 / 3 == 2.0", [], True),
        ("math.floor(-3.5) == -4 and math.ceil(-3.5) == -3 and math.trunc(-3.5) == -3", [], True),
        ("round(2.5) == 2 and round(3.5) == 4 and round(-2.5) == -2", [], True),
        ("1 < 2 < 3 and not (1 < 3 < 2)", [], True),
        ("torch.sym_max(2, 3.0) == 3.0", [], True),
        ("torch.sym_sqrt(16) == 4.0 and torch._sym_sqrt(2) == math.sqrt(2)", [], True),
        ("(L['t0'] if L['t1'] else 0) == 4", [4, True], True),
        ("(L['t0'] if L['t1'] else 0) == 4", [4, False], False),
        ("L['t0'] == 3", [3, "extra args are ignored, as in torch"], True),
        ("2 ** 62 < L['t0']", [2**63], True),
        ("(-8) ** 0.5 != 2", [], True),  # complex result, as Python gives
        ("L['t0']", [0], False),
        ("L['t0']", [0.5], True),
        ("math.nan != math.nan", [], True),
    ],
)
def test_semantics(expr: str, args: list[Any], expected: bool) -> None:
    assert evaluate_guard(expr, args) is expected


def test_sym_max_type_promotion_differs_from_builtin_max() -> None:
    # torch.sym_max promotes to float, builtins.max keeps the winner's type.
    assert evaluate_guard("torch.sym_max(3, 2.0) == 3", []) is True
    assert type(compile_guard("torch.sym_max(3, 2.0)")._fn({})) is float
    assert type(compile_guard("max(3, 2.0)")._fn({})) is int


def test_long_flat_chains_do_not_count_as_nesting() -> None:
    # sympy prints long sums/products left-associatively; they must not hit the
    # depth limit or Python's recursion limit.
    n = 800
    expr = " + ".join(f"L['t{i}']" for i in range(n)) + f" == {n * (n - 1) // 2}"
    guard = compile_guard(expr)
    assert guard.arity == n
    assert guard.evaluate(list(range(n))) is True
    assert guard.evaluate(list(range(1, n + 1))) is False
    conj = " and ".join(f"L['t0'] != {i}" for i in range(5000))
    assert evaluate_guard(conj, [5000]) is True
    assert evaluate_guard(conj, [4999]) is False


def test_leading_whitespace_and_comments_like_eval() -> None:
    assert evaluate_guard("  \tL['t0'] >= 2  # comment", [3]) is True


def test_mapping_arguments_bind_L_directly() -> None:
    assert evaluate_guard("L['x'] + L['t0'] == 5", {"x": 2, "t0": 3}) is True
    with pytest.raises(GuardEvaluationError, match=r"L\['x'\]"):
        evaluate_guard("L['x'] + L['t0'] == 5", {"t0": 3})


# ---------------------------------------------------------------------------
# Guard objects and the cache
# ---------------------------------------------------------------------------


def test_guard_properties() -> None:
    g = compile_guard("L['t10'] > L['t2'] and L['t0'].size()[0] == 3 or L['t2'] < 0")
    assert g.names == ("t0", "t2", "t10")
    assert g.arity == 11
    assert g.source == "L['t10'] > L['t2'] and L['t0'].size()[0] == 3 or L['t2'] < 0"
    assert compile_guard("1 == 1").names == () and compile_guard("1 == 1").arity == 0
    assert "L['t10']" in repr(g)


def test_guard_is_frozen_hashable_and_picklable() -> None:
    g = compile_guard("L['t0'] >= 2")
    with pytest.raises(AttributeError):
        g.source = "True"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del g.names
    assert g == Guard("L['t0'] >= 2") and hash(g) == hash(Guard("L['t0'] >= 2"))
    assert g != Guard("L['t0'] >= 3")
    assert {g, Guard("L['t0'] >= 2")} == {g}
    clone = pickle.loads(pickle.dumps(g))
    assert clone == g and clone.evaluate([5]) is True and clone.evaluate([1]) is False


def test_compile_guard_is_cached() -> None:
    expr = "L['t0'] * 7 == 49 and L['t1'] >= 0"
    assert compile_guard(expr) is compile_guard(expr)
    assert Guard(expr) is not compile_guard(expr)
    with pytest.raises(TypeError):
        compile_guard(b"L['t0'] == 1")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# Refusals
# ---------------------------------------------------------------------------

REFUSED = [
    ("__import__('os')", "call to '__import__'"),
    ("__import__('os').system('true') == 0", "attribute access"),
    ("L.__class__", "attribute access 'L.__class__'"),
    ("L['t0'].__class__", "attribute access"),
    ("L['t0'].size.__self__", "attribute access"),
    ("math.__dict__", "attribute access 'math.__dict__'"),
    ("torch.ops.aten.add(1, 2)", "attribute access"),
    ("math.pi > 3", "attribute access 'math.pi'"),
    ("(lambda: 1)() == 1", "calling a lambda"),
    ("lambda: 1", "lambda"),
    ("[x for x in (1, 2)]", "list comprehension"),
    ("sum(x for x in (1, 2))", "call to 'sum'"),
    ("max(x for x in (1, 2))", "generator expression"),
    ("{x: 1 for x in (1,)}", "dict comprehension"),
    ("open('/etc/passwd')", "call to 'open'"),
    ("exec('1')", "call to 'exec'"),
    ("eval('1')", "call to 'eval'"),
    ("getattr(L, 'keys')", "call to 'getattr'"),
    ("type(L)", "call to 'type'"),
    ("max(*[1, 2])", "starred expression"),
    ("abs(x=1)", "keyword argument 'x='"),
    ("abs(**{})", "'**' argument unpacking"),
    ("f'{L}'", "f-string"),
    ("(y := 1)", "assignment expression (:=)"),
    ("2 ** 100000", "exponent 100000"),
    ("L['t0'] ** -5000", "exponent -5000"),
    ("L[0] == 1", "indexing L with anything but a string literal"),
    ("L['t0'][0]", "subscript"),
    ("L['t0'].size()", "un-indexed .size()"),
    ("L['t0'].size(0) == 1", "arguments to .size()"),
    ("L['t0'].size()[L['t1']]", "integer literal"),
    ("L['t0'].dim() == 2", "attribute access"),
    ("L['t0'].inner.size()[0] == 2", "attribute access '.inner'"),
    ("x > 1", "name 'x'"),
    ("L", "bare name 'L'"),
    ("math.floor", "used without calling it"),
    ("'abc' == 'abc'", "a str literal"),
    ("None", "a NoneType literal"),
    ("1j == 1j", "a complex literal"),
    ("(1, 2)", "tuple"),
    ("[1]", "list display"),
    ("1 << 3", "operator <<"),
    ("~1", "operator ~"),
    ("1 in (1,)", "operator 'in'"),
    ("1 is 1", "operator 'is'"),
    ("max(1)", "with 1 argument(s)"),
    ("torch.sym_max(1, 2, 3)", "with 3 argument(s)"),
    ("Where(True, 1, 2)", "call to 'Where'"),
    ("1 +", "not a valid Python expression"),
    ("x = 1", "not a valid Python expression"),
    ("", "empty"),
    ("(" * 200 + "1" + ")" * 200, "nests brackets deeper"),
    ("-" * 150 + "1", "nesting deeper than"),
    ("not " * 150 + "True", "nesting deeper than"),
    ("-" * 100_000 + "1", "too deeply"),
    (" + ".join(["1"] * 5000), "too deeply"),
    ("abs(" * 120 + "1" + ")" * 120, "nests brackets deeper"),
    ("1" * 5000, "not a valid Python expression"),
    ("1 == 1\x00", "not a valid Python expression"),
]


@pytest.mark.parametrize(("expr", "needle"), REFUSED, ids=[r[0][:30] for r in REFUSED])
def test_refused(expr: str, needle: str) -> None:
    with pytest.raises(GuardSyntaxError) as info:
        compile_guard(expr)
    message = str(info.value)
    assert needle in message, message
    assert isinstance(info.value, ValueError)


def test_refusal_reports_position() -> None:
    with pytest.raises(GuardSyntaxError) as info:
        compile_guard("L['t0'] >= 2 and open('x')")
    assert info.value.lineno == 1 and info.value.col == 18
    assert "line 1, column 18" in str(info.value)
    assert "open('x')" in str(info.value)


def test_too_long_expression_is_refused() -> None:
    with pytest.raises(GuardSyntaxError, match="characters long"):
        compile_guard("1 == 1 and " * (guards.MAX_GUARD_CHARS // 10) + "True")


def test_runtime_size_caps() -> None:
    g = compile_guard("2 ** L['t0'] > 0")
    assert g.evaluate([100]) is True
    with pytest.raises(GuardEvaluationError, match="exponent"):
        g.evaluate([10**6])
    assert evaluate_guard("1 ** L['t0'] == 1 and (-1) ** L['t0'] == 1", [10**12]) is True
    square = " * ".join(["L['t0']"] * 200)
    with pytest.raises(GuardEvaluationError, match="bits"):
        evaluate_guard(f"{square} > 0", [2**62])
    with pytest.raises(GuardEvaluationError, match="ndigits"):
        evaluate_guard("round(L['t0'], -10 ** 9) == 0", [5])


def test_module_never_calls_eval_exec_or_getattr() -> None:
    sources = sorted(GUARDS_DIR.glob("*.py"))
    assert len(sources) > 1
    forbidden = {"eval", "exec", "compile", "__import__", "getattr", "setattr", "globals", "locals", "vars"}
    for node in (n for s in sources for n in ast.walk(ast.parse(s.read_text()))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "getattr":
                # The single getattr reads torch.Tensor off sys.modules["torch"].
                assert ast.unparse(node) == 'getattr(torch, "Tensor", None)'.replace('"', "'")
                continue
            assert node.func.id not in forbidden, ast.unparse(node)


def test_module_imports_without_torch() -> None:
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('g', {str(GUARDS_DIR / '__init__.py')!r},\n"
        f"    submodule_search_locations=[{str(GUARDS_DIR)!r}])\n"
        "m = importlib.util.module_from_spec(spec); sys.modules['g'] = m; spec.loader.exec_module(m)\n"
        "assert m.evaluate_guard(\"L['t0'] // 2 == 3\", [7])\n"
        "assert 'torch' not in sys.modules, 'guards imported torch'\n"
        "assert not any(k.endswith('_core') for k in sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# ---------------------------------------------------------------------------
# Argument errors
# ---------------------------------------------------------------------------


def test_too_few_arguments() -> None:
    g = compile_guard("L['t0'] == 1 or L['t2'] == 2")
    with pytest.raises(GuardEvaluationError, match=r"needs at least 3 argument\(s\), but 2 were given"):
        g.evaluate([1, 2])
    assert g.evaluate([1, 0, 0]) is True


def test_too_few_arguments_even_when_torch_would_short_circuit(torch: ModuleType) -> None:
    # torch's eval never reaches L['t1'] here and answers True; we insist on a
    # full argument vector so a caller's arity bug cannot go unnoticed.
    expr = "L['t0'] == 1 or L['t1'] == 2"
    assert _live_torch(torch, expr, [1]) == ("result", True)
    with pytest.raises(GuardEvaluationError, match="at least 2"):
        evaluate_guard(expr, [1])


def test_unbindable_placeholder_name() -> None:
    with pytest.raises(GuardEvaluationError, match=r"L\['x'\].*can never provide"):
        evaluate_guard("L['x'] == 1", [1, 2, 3])


def test_bad_argument_types(torch: ModuleType) -> None:
    with pytest.raises(GuardEvaluationError, match=r"L\['t0'\] must be an int, float or bool, got str"):
        evaluate_guard("L['t0'] == 1", ["1"])
    with pytest.raises(GuardEvaluationError, match="got Tensor"):
        evaluate_guard("L['t0'] == 1", [torch.ones(1)])
    with pytest.raises(GuardEvaluationError, match="to be a torch.Tensor, got int"):
        evaluate_guard("L['t0'].size()[0] == 1", [1])
    with pytest.raises(GuardEvaluationError, match="only 1 dimension"):
        evaluate_guard("L['t0'].size()[1] == 1", [torch.ones(3)])
    with pytest.raises(TypeError, match="must be a sequence"):
        evaluate_guard("L['t0'] == 1", "1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a sequence"):
        evaluate_guard("L['t0'] == 1", 1)  # type: ignore[arg-type]


def test_tensor_properties(torch: ModuleType) -> None:
    t = torch.zeros(20).as_strided((3, 4), (1, 3), 2)
    g = compile_guard(
        "L['t0'].size()[0] == 3 and L['t0'].size()[-1] == 4 and L['t0'].stride()[1] == 3 "
        "and L['t0'].storage_offset() == 2"
    )
    assert g.evaluate([t]) is True
    assert g.evaluate([torch.zeros(3, 4)]) is False


def test_arithmetic_errors() -> None:
    for expr, args, needle in [
        ("L['t0'] // L['t1'] == 0", [1, 0], "ZeroDivisionError"),
        ("L['t0'] % L['t1'] == 0", [1, 0], "ZeroDivisionError"),
        ("L['t0'] / L['t1'] == 0", [1, 0], "ZeroDivisionError"),
        ("math.sqrt(L['t0']) > 0", [-1], "math domain error"),
        ("math.floor(L['t0']) > 0", [math.inf], "OverflowError"),
        ("torch.sym_float(L['t0']) > 0", [10**400], "OverflowError"),
        ("cast_symbool_to_symint_guardless(L['t0']) == 1", [1], "expects a bool"),
        ("torch.sym_max((-8) ** 0.5, 1) == 1", [], "expects int or float"),
        ("(-8) ** 0.5 < 1", [], "TypeError"),
    ]:
        with pytest.raises(GuardEvaluationError, match=needle):
            evaluate_guard(expr, args)
    # bool is an int for torch.sym_max, exactly as in torch.
    assert evaluate_guard("torch.sym_max(L['t0'], 1) == 1", [True]) is True


# ---------------------------------------------------------------------------
# select
# ---------------------------------------------------------------------------


def test_select_picks_first_passing_candidate() -> None:
    candidates = [
        ("L['t0'] == 4", "exact-4"),
        ("L['t0'] % 2 == 0 and 2 <= L['t0']", "even"),
        (None, "fallback"),
        ("L['t0'] >= 0", "unreachable"),
    ]
    assert select(candidates, [4]) == "exact-4"
    assert select(candidates, [8]) == "even"
    assert select(candidates, [7]) == "fallback"
    assert select(candidates[:2], [7]) is None
    assert select([], [7]) is None
    assert select([("", "empty guard passes, as in torch")], [7]) == "empty guard passes, as in torch"


def test_select_real_corpus_guards() -> None:
    # Two stored variants of one key, as FxGraphCache keeps them.
    odd = next(c["expr"] for c in CASES if c["expr"].startswith("(L['t0'] % 2) != 0"))
    even = next(c["expr"] for c in CASES if c["expr"].startswith("(L['t0'] % 2) == 0"))
    entries = [(even, "even-graph"), (odd, "odd-graph")]
    assert select(entries, [6]) == "even-graph"
    assert select(entries, [7]) == "odd-graph"
    assert select(entries, [1]) is None


def test_select_is_lazy_and_errors() -> None:
    def candidates() -> Any:
        yield ("L['t0'] > 1", "first")
        raise AssertionError("select consumed past the passing candidate")

    assert select(candidates(), [2]) == "first"
    bad = [("open('x')", "bad"), ("L['t0'] // 0 == 1", "div0"), ("L['t0'] > 1", "good")]
    with pytest.raises(GuardSyntaxError):
        select(bad, [2])
    with pytest.raises(GuardEvaluationError):
        select(bad[1:], [2])
    assert select(bad, [2], on_error="skip") == "good"
    with pytest.raises(ValueError, match="on_error"):
        select(bad, [2], on_error="ignore")  # type: ignore[arg-type]
