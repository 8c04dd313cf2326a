"""Evaluate torch symbolic-shape guard expressions without ``eval``.

torch's compile caches (``FxGraphCache``, ``AOTAutogradCache``) and the
precompile results (``CompiledFxGraph.guards_expr``,
``BundledAOTAutogradResult.guards_expr``) store the dynamic-shape guards of an
artifact as a *string* of Python source, produced by
``ShapeEnv.produce_guards_expression(placeholders)`` and later checked with
``ShapeEnv.evaluate_guards_expression(code, args)``, which is literally::

    arg_names = [f"t{i}" for i in range(len(args))]
    return eval(code, SYMPY_INTERP, {"L": dict(zip(arg_names, args))})

A store that reads artifacts from disk must not ``eval`` strings it found
there, so this module parses the expression with :mod:`ast`, checks every node
against an allowlist of exactly what torch's printer
(``ShapeGuardPythonPrinter`` / ``PythonPrinter`` in
``torch/utils/_sympy/printers.py``) emits, and compiles the result into a tree
of plain Python closures.  Nothing here imports torch; tensors are only
recognised when torch is already imported by the caller.

The accepted language (everything else is a :class:`GuardSyntaxError`):

* literals: ``int``, ``float``, ``True``/``False``; ``math.inf``, ``math.nan``
* placeholders: ``L['t0']`` (any string key), and for tensor placeholders
  ``L['t0'].size()[i]``, ``L['t0'].stride()[i]``, ``L['t0'].storage_offset()``
* operators: ``+ - * / // % ** & | ^``, unary ``-``/``+``, ``not``, ``and``,
  ``or``, comparisons ``== != < <= > >=`` (chained), ``a if c else b``
* functions: ``abs``, ``max``, ``min``, ``round``,
  ``math.{floor, ceil, trunc, sqrt, isnan, cos, cosh, acos, sin, sinh, asin,
  tan, tanh, atan, log2}``, ``torch.{sym_max, sym_min, sym_float, _sym_sqrt,
  sym_sqrt}``, ``IsNonOverlappingAndDenseIndicator``,
  ``cast_symbool_to_symint_guardless`` (the two non-module names in torch's
  ``SYMPY_INTERP`` namespace).

Arithmetic is Python's own ``int``/``float`` arithmetic (the same operators
torch's ``eval`` runs), so ``//`` and ``%`` floor towards negative infinity,
``/`` is true division, and ``math.floor``/``math.ceil`` behave identically on
negative numbers.
"""

from __future__ import annotations

import ast
import functools
import math
import operator
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, Literal, TypeVar

__all__ = [
    "Guard",
    "GuardEvaluationError",
    "GuardSyntaxError",
    "MAX_DEPTH",
    "MAX_EXPONENT",
    "MAX_GUARD_CHARS",
    "MAX_INT_BITS",
    "compile_guard",
    "evaluate_guard",
    "select",
]

T = TypeVar("T")

# ---------------------------------------------------------------------------
# Resource limits.  Real guards are a few hundred bytes to a few KiB of
# shallow "a and b and c" chains over 64-bit sizes, so these are generous for
# genuine input while keeping a hostile string from burning CPU or memory.
# ---------------------------------------------------------------------------

#: Longest accepted expression, in characters.
MAX_GUARD_CHARS: Final = 1 << 20
#: Deepest accepted nesting (brackets, calls, right operands, unary chains).
#: Left-associative operator chains (``a + b + c + ...``) are flattened first
#: and do not count, since sympy prints long sums and products that way.
MAX_DEPTH: Final = 100
#: Most AST nodes accepted in one expression.
MAX_NODES: Final = 250_000
#: Largest ``|exponent|`` accepted for ``int ** int``: a literal beyond it is a
#: syntax error, a computed one an evaluation error.
MAX_EXPONENT: Final = 4096
#: Largest integer (in bits) that ``*``, ``**``, a literal or ``round`` may
#: produce.  Sizes are int64, so even products of dozens of sizes fit.
MAX_INT_BITS: Final = 1 << 13

# Expressions longer than this are compiled but not kept in the LRU cache, so
# the cache's memory stays bounded by roughly maxsize * this many characters.
_CACHEABLE_CHARS: Final = 1 << 16
_CACHE_SIZE: Final = 1024

_PLACEHOLDER = re.compile(r"t(0|[1-9][0-9]*)")


class GuardSyntaxError(ValueError):
    """The expression is not valid guard syntax or uses a construct outside the
    allowlist (unknown name or function, attribute access, lambda, ...).

    ``lineno``/``col`` (1-based) locate the offending construct when known.
    """

    def __init__(
        self, message: str, *, lineno: int | None = None, col: int | None = None
    ) -> None:
        super().__init__(message)
        self.lineno = lineno
        self.col = col


class GuardEvaluationError(ValueError):
    """A well-formed guard could not be evaluated against the given arguments:
    too few arguments, a placeholder that was not supplied, an argument of the
    wrong kind, or an arithmetic failure (division by zero, overflow, math
    domain error, a result over the size caps)."""


# ---------------------------------------------------------------------------
# Runtime helpers.  Every value flowing through a compiled guard is a builtin
# int/float/bool (or complex, which Python's ``**`` can produce from a negative
# base); arguments are checked on load, so operators never dispatch to
# user-defined ``__dunder__`` methods.
# ---------------------------------------------------------------------------

_Env = Mapping[str, object]
_Fn = Callable[[_Env], Any]

_ARG_SCALARS: Final = frozenset({int, float, bool})


def _is_int(v: object) -> bool:
    t = type(v)
    return t is int or t is bool


def _mul(a: Any, b: Any) -> Any:
    if _is_int(a) and _is_int(b) and a.bit_length() + b.bit_length() > MAX_INT_BITS + 1:
        raise GuardEvaluationError(
            f"integer product exceeds {MAX_INT_BITS} bits; refusing to compute it"
        )
    return a * b


def _pow(a: Any, b: Any) -> Any:
    if _is_int(a) and _is_int(b):
        # |a| <= 1 is cheap for any exponent; everything else is capped so a
        # guard cannot ask for 10**10**9.
        if abs(a) > 1:
            if abs(b) > MAX_EXPONENT:
                raise GuardEvaluationError(
                    f"exponent {b} exceeds the cap of {MAX_EXPONENT}"
                )
            if b > 0 and (a.bit_length() - 1) * b > MAX_INT_BITS:
                raise GuardEvaluationError(
                    f"{a} ** {b} exceeds {MAX_INT_BITS} bits; refusing to compute it"
                )
    return a**b


def _round(x: Any, ndigits: Any = None) -> Any:
    if ndigits is None:
        return round(x)
    # round(int, -n) computes 10**n internally.
    if _is_int(ndigits) and abs(ndigits) > MAX_EXPONENT:
        raise GuardEvaluationError(
            f"round() ndigits {ndigits} exceeds the cap of {MAX_EXPONENT}"
        )
    return round(x, ndigits)


def _sym_minmax(pick: Callable[..., Any], name: str) -> Callable[[Any, Any], Any]:
    # Mirrors torch.sym_max/sym_min on plain numbers: only int/float (bool is
    # an int) are accepted, and the result is promoted to float if either
    # argument is a float -- unlike builtins.max, which keeps the winner's type.
    def fn(a: Any, b: Any) -> Any:
        for v in (a, b):
            if not isinstance(v, (int, float)):
                raise GuardEvaluationError(
                    f"torch.{name} expects int or float, got {type(v).__name__}"
                )
        if isinstance(a, float) or isinstance(b, float):
            return float(pick(a, b))
        return pick(a, b)

    return fn


def _sym_float(a: Any) -> float:
    # torch.sym_float on a plain number is builtins.float.
    return float(a)


def _is_non_overlapping_and_dense_flat(*args: Any) -> int:
    # Port of torch's _eval_is_non_overlapping_and_dense_flat: the printer emits
    # IsNonOverlappingAndDenseIndicator(size0, size1, ..., stride0, stride1, ...).
    dim = len(args) // 2
    sizes, strides = args[:dim], args[dim:]
    if len(sizes) == 1:
        return int(strides[0] == 1 or sizes[0] < 2)
    expected_stride = 1
    for length, stride in sorted(zip(sizes, strides), key=operator.itemgetter(1)):
        if length == 1:
            continue
        if stride != expected_stride:
            return 0
        expected_stride = _mul(expected_stride, length)
    return 1


def _cast_symbool_to_symint_guardless(x: Any) -> int:
    # torch's version maps a bool to 1/0 and treats anything else as a SymBool
    # (which a plain number is not), so non-bools are an error there too.
    if type(x) is not bool:
        raise GuardEvaluationError(
            "cast_symbool_to_symint_guardless expects a bool, "
            f"got {type(x).__name__}"
        )
    return 1 if x else 0


# name -> (min args, max args or None, implementation)
_FUNCTIONS: Final[dict[str, tuple[int, int | None, Callable[..., Any]]]] = {
    "abs": (1, 1, abs),
    # The printer only emits max/min with >= 2 arguments; the one-argument
    # form would iterate its argument, which is never a guard's intent.
    "max": (2, None, max),
    "min": (2, None, min),
    "round": (1, 2, _round),
    "IsNonOverlappingAndDenseIndicator": (0, None, _is_non_overlapping_and_dense_flat),
    "cast_symbool_to_symint_guardless": (1, 1, _cast_symbool_to_symint_guardless),
    "math.floor": (1, 1, math.floor),
    "math.ceil": (1, 1, math.ceil),
    "math.trunc": (1, 1, math.trunc),
    # math.sqrt is what older torch releases printed for OpaqueUnaryFn_sqrt
    # (newer ones print torch._sym_sqrt); likewise older ones print max/min
    # where newer ones print torch.sym_max/sym_min.
    "math.sqrt": (1, 1, math.sqrt),
    "math.isnan": (1, 1, math.isnan),
    "math.cos": (1, 1, math.cos),
    "math.cosh": (1, 1, math.cosh),
    "math.acos": (1, 1, math.acos),
    "math.sin": (1, 1, math.sin),
    "math.sinh": (1, 1, math.sinh),
    "math.asin": (1, 1, math.asin),
    "math.tan": (1, 1, math.tan),
    "math.tanh": (1, 1, math.tanh),
    "math.atan": (1, 1, math.atan),
    "math.log2": (1, 1, math.log2),
    "torch.sym_max": (2, 2, _sym_minmax(max, "sym_max")),
    "torch.sym_min": (2, 2, _sym_minmax(min, "sym_min")),
    "torch.sym_float": (1, 1, _sym_float),
    # torch._sym_sqrt on a plain number is math.sqrt.
    "torch._sym_sqrt": (1, 1, math.sqrt),
    "torch.sym_sqrt": (1, 1, math.sqrt),
}

_CONSTANTS: Final[dict[str, float]] = {"math.inf": math.inf, "math.nan": math.nan}

_BINOPS: Final[dict[type[ast.operator], tuple[str, Callable[[Any, Any], Any]]]] = {
    ast.Add: ("+", operator.add),
    ast.Sub: ("-", operator.sub),
    ast.Mult: ("*", _mul),
    ast.Div: ("/", operator.truediv),
    ast.FloorDiv: ("//", operator.floordiv),
    ast.Mod: ("%", operator.mod),
    ast.Pow: ("**", _pow),
    ast.BitAnd: ("&", operator.and_),
    ast.BitOr: ("|", operator.or_),
    ast.BitXor: ("^", operator.xor),
}

_UNARYOPS: Final[dict[type[ast.unaryop], Callable[[Any], Any]]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Not: operator.not_,
}

_CMPOPS: Final[dict[type[ast.cmpop], Callable[[Any, Any], Any]]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}

_TENSOR_PROPS: Final = ("size", "stride")

# Friendly names for constructs we refuse, so the message says "lambda" rather
# than "Lambda node".
_DESCRIPTIONS: Final[dict[type[ast.AST], str]] = {
    ast.Lambda: "lambda",
    ast.ListComp: "list comprehension",
    ast.SetComp: "set comprehension",
    ast.DictComp: "dict comprehension",
    ast.GeneratorExp: "generator expression",
    ast.JoinedStr: "f-string",
    ast.FormattedValue: "f-string",
    ast.NamedExpr: "assignment expression (:=)",
    ast.Starred: "starred expression",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield from",
    ast.List: "list display",
    ast.Tuple: "tuple",
    ast.Set: "set display",
    ast.Dict: "dict display",
    ast.Slice: "slice",
    ast.Attribute: "attribute access",
    ast.Subscript: "subscript",
    ast.Call: "call",
    ast.Name: "name",
}

_OP_DESCRIPTIONS: Final[dict[type[ast.AST], str]] = {
    ast.LShift: "operator <<",
    ast.RShift: "operator >>",
    ast.MatMult: "operator @",
    ast.Invert: "operator ~",
    ast.Is: "operator 'is'",
    ast.IsNot: "operator 'is not'",
    ast.In: "operator 'in'",
    ast.NotIn: "operator 'not in'",
}


# ---------------------------------------------------------------------------
# Compiler: validated ast -> closures.
# ---------------------------------------------------------------------------


class _Compiler:
    def __init__(self, source: str, col_shift: int) -> None:
        self.source = source
        self.col_shift = col_shift
        self.names: set[str] = set()
        self.nodes = 0

    # -- errors ------------------------------------------------------------
    def fail(self, node: ast.AST, what: str, hint: str = "") -> GuardSyntaxError:
        lineno: int | None = None
        col: int | None = None
        where = ""
        if isinstance(node, (ast.expr, ast.keyword)):
            lineno, col = node.lineno, node.col_offset
            col = col + 1 + (self.col_shift if lineno == 1 else 0)
            where = f" at line {lineno}, column {col}"
        snippet = ""
        try:
            segment = ast.get_source_segment(self.source, node)
        except Exception:  # pragma: no cover - positions are best effort
            segment = None
        if segment:
            if len(segment) > 80:
                segment = segment[:77] + "..."
            snippet = f": {segment!r}"
        return GuardSyntaxError(
            f"{what} is not allowed in a guard expression{where}{snippet}"
            + (f" ({hint})" if hint else ""),
            lineno=lineno,
            col=col,
        )

    def describe(self, node: ast.AST) -> str:
        return _DESCRIPTIONS.get(type(node), f"{type(node).__name__} expression")

    def tick(self, node: ast.AST, depth: int) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self.fail(node, f"an expression with more than {MAX_NODES} nodes")
        if depth > MAX_DEPTH:
            raise self.fail(node, f"nesting deeper than {MAX_DEPTH} levels")

    # -- entry -------------------------------------------------------------
    def expr(self, node: ast.AST, depth: int) -> _Fn:
        self.tick(node, depth)
        if isinstance(node, ast.Constant):
            return self.constant(node)
        if isinstance(node, ast.BinOp):
            return self.binop_chain(node, depth)
        if isinstance(node, ast.UnaryOp):
            return self.unaryop(node, depth)
        if isinstance(node, ast.BoolOp):
            return self.boolop(node, depth)
        if isinstance(node, ast.Compare):
            return self.compare(node, depth)
        if isinstance(node, ast.IfExp):
            return self.ifexp(node, depth)
        if isinstance(node, ast.Call):
            return self.call(node, depth)
        if isinstance(node, ast.Subscript):
            return self.subscript(node, depth)
        if isinstance(node, ast.Attribute):
            return self.attribute(node)
        if isinstance(node, ast.Name):
            raise self.fail(node, self.name_problem(node.id))
        raise self.fail(node, self.describe(node))

    # -- leaves ------------------------------------------------------------
    def constant(self, node: ast.Constant) -> _Fn:
        value = node.value
        if type(value) is int:
            if value.bit_length() > MAX_INT_BITS:
                raise self.fail(node, f"an integer literal over {MAX_INT_BITS} bits")
        elif type(value) not in (float, bool):
            raise self.fail(node, f"a {type(value).__name__} literal")
        return lambda env: value

    def name_problem(self, name: str) -> str:
        if name in ("L", "math", "torch"):
            return f"bare name {name!r} (it may only be indexed/called as in torch's guards)"
        return f"name {name!r}"

    def attribute(self, node: ast.Attribute) -> _Fn:
        dotted = _dotted(node)
        if dotted in _CONSTANTS:
            value = _CONSTANTS[dotted]
            return lambda env: value
        if dotted in _FUNCTIONS:
            raise self.fail(node, f"function {dotted!r} used without calling it")
        raise self.bad_attribute(node)

    def bad_attribute(self, node: ast.Attribute) -> GuardSyntaxError:
        dotted = _dotted(node)
        if dotted is not None:
            return self.fail(node, f"attribute access {dotted!r}")
        return self.fail(node, f"attribute access '.{node.attr}'")

    # -- placeholders --------------------------------------------------------
    def placeholder_name(self, node: ast.AST) -> str | None:
        """Return 'tN' if ``node`` is ``L['tN']`` (validating the key), else None."""
        if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)):
            return None
        if node.value.id != "L":
            return None
        key = node.slice
        if not (isinstance(key, ast.Constant) and type(key.value) is str):
            raise self.fail(node, "indexing L with anything but a string literal")
        self.tick(key, 0)
        self.names.add(key.value)
        return key.value

    def subscript(self, node: ast.Subscript, depth: int) -> _Fn:
        name = self.placeholder_name(node)
        if name is not None:
            return _scalar_loader(name)
        # L['t0'].size()[i] / L['t0'].stride()[i]
        call = node.value
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr in _TENSOR_PROPS
        ):
            base = self.placeholder_name(call.func.value)
            if base is None:
                # e.g. L['t0'].inner.size()[0] (a tensor-subclass attribute):
                # report the innermost refused attribute, not ".size".
                inner = call.func.value
                raise self.bad_attribute(inner if isinstance(inner, ast.Attribute) else call.func)
            if call.args or call.keywords:
                raise self.fail(call, f"arguments to .{call.func.attr}()")
            index = _int_literal(node.slice)
            if index is None:
                raise self.fail(node.slice, f"indexing .{call.func.attr}() with anything but an integer literal")
            self.tick(call, depth + 1)
            return _tensor_prop_loader(base, call.func.attr, index)
        if isinstance(call, ast.Name):
            raise self.fail(node, f"subscript of {self.name_problem(call.id)}")
        raise self.fail(node, f"subscript of a {self.describe(call)}")

    # -- calls -------------------------------------------------------------
    def call(self, node: ast.Call, depth: int) -> _Fn:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "storage_offset":
            base = self.placeholder_name(func.value)
            if base is None:
                raise self.bad_attribute(func)
            if node.args or node.keywords:
                raise self.fail(node, "arguments to .storage_offset()")
            return _tensor_prop_loader(base, "storage_offset", None)
        if isinstance(func, ast.Attribute) and func.attr in _TENSOR_PROPS:
            if self.placeholder_name(func.value) is not None:
                if node.args or node.keywords:
                    raise self.fail(node, f"arguments to .{func.attr}()")
                raise self.fail(node, f"un-indexed .{func.attr}()")
        fname = _dotted(func)
        if fname is None or fname not in _FUNCTIONS:
            if fname is None and isinstance(func, ast.Attribute):
                raise self.bad_attribute(func)
            if fname is None:
                raise self.fail(node, f"calling a {self.describe(func)}")
            raise self.fail(
                node,
                f"call to {fname!r}",
                f"allowed functions: {', '.join(sorted(_FUNCTIONS))}",
            )
        for kw in node.keywords:
            label = f"keyword argument '{kw.arg}='" if kw.arg else "'**' argument unpacking"
            raise self.fail(kw, f"{label} in call to {fname!r}")
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise self.fail(arg, f"starred expression in call to {fname!r}")
        # Arguments first, so a refused construct inside them (a generator
        # expression, say) is what gets reported.
        args = [self.expr(a, depth + 1) for a in node.args]
        lo, hi, impl = _FUNCTIONS[fname]
        n = len(node.args)
        if n < lo or (hi is not None and n > hi):
            expected = f"{lo}" if lo == hi else (f"at least {lo}" if hi is None else f"{lo} to {hi}")
            raise self.fail(node, f"call to {fname!r} with {n} argument(s) (expected {expected})")
        if n == 1:
            (a0,) = args
            return lambda env: impl(a0(env))
        if n == 2:
            a0, a1 = args
            return lambda env: impl(a0(env), a1(env))
        return lambda env: impl(*[a(env) for a in args])

    # -- operators -----------------------------------------------------------
    def binop_chain(self, node: ast.BinOp, depth: int) -> _Fn:
        # Flatten the left spine: ((a op1 b) op2 c) evaluates exactly like
        # acc = a; acc = op1(acc, b); acc = op2(acc, c), without recursion.
        spine: list[ast.BinOp] = []
        cur: ast.AST = node
        while isinstance(cur, ast.BinOp):
            if spine:
                self.tick(cur, depth)
            spine.append(cur)
            cur = cur.left
        first = self.expr(cur, depth + 1)
        steps: list[tuple[Callable[[Any, Any], Any], _Fn]] = []
        for b in reversed(spine):
            op = _BINOPS.get(type(b.op))
            if op is None:
                raise self.fail(b, _OP_DESCRIPTIONS.get(type(b.op), type(b.op).__name__))
            if isinstance(b.op, ast.Pow):
                exponent = _int_literal(b.right)
                if exponent is not None and abs(exponent) > MAX_EXPONENT:
                    raise self.fail(b, f"exponent {exponent} (cap is {MAX_EXPONENT})")
            steps.append((op[1], self.expr(b.right, depth + 1)))
        if len(steps) == 1:
            ((fn, right),) = steps
            return lambda env: fn(first(env), right(env))

        def chain(env: _Env) -> Any:
            acc = first(env)
            for fn, right in steps:
                acc = fn(acc, right(env))
            return acc

        return chain

    def unaryop(self, node: ast.UnaryOp, depth: int) -> _Fn:
        op = _UNARYOPS.get(type(node.op))
        if op is None:
            raise self.fail(node, _OP_DESCRIPTIONS.get(type(node.op), type(node.op).__name__))
        operand = self.expr(node.operand, depth + 1)
        return lambda env: op(operand(env))

    def boolop(self, node: ast.BoolOp, depth: int) -> _Fn:
        # Python semantics: short-circuit and return the deciding operand.
        values = [self.expr(v, depth + 1) for v in node.values]
        if isinstance(node.op, ast.And):

            def and_(env: _Env) -> Any:
                result: Any = True
                for v in values:
                    result = v(env)
                    if not result:
                        return result
                return result

            return and_

        def or_(env: _Env) -> Any:
            result: Any = False
            for v in values:
                result = v(env)
                if result:
                    return result
            return result

        return or_

    def compare(self, node: ast.Compare, depth: int) -> _Fn:
        ops: list[Callable[[Any, Any], Any]] = []
        for op in node.ops:
            fn = _CMPOPS.get(type(op))
            if fn is None:
                raise self.fail(node, _OP_DESCRIPTIONS.get(type(op), type(op).__name__))
            ops.append(fn)
        left = self.expr(node.left, depth + 1)
        rights = [self.expr(c, depth + 1) for c in node.comparators]
        if len(ops) == 1:
            fn0, right0 = ops[0], rights[0]
            return lambda env: fn0(left(env), right0(env))
        pairs = list(zip(ops, rights))

        # Chained: a < b < c is (a < b) and (b < c) with b evaluated once.
        def chained(env: _Env) -> Any:
            a = left(env)
            result: Any = True
            for fn, right in pairs:
                b = right(env)
                result = fn(a, b)
                if not result:
                    return result
                a = b
            return result

        return chained

    def ifexp(self, node: ast.IfExp, depth: int) -> _Fn:
        test = self.expr(node.test, depth + 1)
        body = self.expr(node.body, depth + 1)
        orelse = self.expr(node.orelse, depth + 1)
        return lambda env: body(env) if test(env) else orelse(env)


def _dotted(node: ast.AST) -> str | None:
    """'abs' for Name('abs'), 'math.floor' for math.floor; None otherwise."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return None


def _int_literal(node: ast.AST) -> int | None:
    """The value of an int literal, optionally negated (``-3``), else None."""
    sign = 1
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        sign = -1 if isinstance(node.op, ast.USub) else 1
        node = node.operand
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return sign * node.value
    return None


def _ref(name: str) -> str:
    return f"L[{name!r}]"


def _missing(name: str) -> GuardEvaluationError:
    return GuardEvaluationError(f"guard reads {_ref(name)} but no such argument was given")


def _scalar_loader(name: str) -> _Fn:
    def load(env: _Env) -> Any:
        try:
            value = env[name]
        except KeyError:
            raise _missing(name) from None
        if type(value) not in _ARG_SCALARS:
            raise GuardEvaluationError(
                f"{_ref(name)} must be an int, float or bool, got {type(value).__name__}"
            )
        return value

    return load


def _torch_tensor_type() -> type | None:
    # Tensors can only exist if the caller already imported torch; looking it
    # up lazily keeps this module importable (and fast to import) without it.
    torch = sys.modules.get("torch")
    tensor = getattr(torch, "Tensor", None) if torch is not None else None
    return tensor if isinstance(tensor, type) else None


def _tensor_prop_loader(name: str, prop: str, index: int | None) -> _Fn:
    rendered = f"{_ref(name)}.{prop}()" + (f"[{index}]" if index is not None else "")

    def load(env: _Env) -> Any:
        try:
            value: Any = env[name]
        except KeyError:
            raise _missing(name) from None
        tensor_type = _torch_tensor_type()
        if tensor_type is None or not isinstance(value, tensor_type):
            raise GuardEvaluationError(
                f"{rendered} needs {_ref(name)} to be a torch.Tensor, "
                f"got {type(value).__name__}"
            )
        tensor: Any = value  # narrowed by isinstance to an opaque type
        if index is None:
            result = tensor.storage_offset()
        else:
            dims = tensor.size() if prop == "size" else tensor.stride()
            try:
                result = dims[index]
            except IndexError:
                raise GuardEvaluationError(
                    f"{rendered}: tensor has only {len(dims)} dimension(s)"
                ) from None
        if type(result) is not int:
            # A FakeTensor with symbolic shapes yields SymInt; we only do
            # concrete evaluation.
            raise GuardEvaluationError(
                f"{rendered} is a {type(result).__name__}, not a concrete int"
            )
        return result

    return load


def _bracket_depth(source: str) -> int:
    depth = deepest = 0
    for ch in source:
        if ch in "([{":
            depth += 1
            if depth > deepest:
                deepest = depth
        elif ch in ")]}":
            depth -= 1
    return deepest


def _compile(source: str) -> tuple[_Fn, frozenset[str]]:
    if not isinstance(source, str):
        raise TypeError(f"guard expression must be a str, got {type(source).__name__}")
    if len(source) > MAX_GUARD_CHARS:
        raise GuardSyntaxError(
            f"guard expression is {len(source)} characters long; the limit is {MAX_GUARD_CHARS}"
        )
    # builtins.eval (what torch uses) ignores leading spaces and tabs; ast.parse
    # would call them an indentation error.
    stripped = source.lstrip(" \t")
    col_shift = len(source) - len(stripped)
    if not stripped.strip():
        raise GuardSyntaxError("guard expression is empty")
    # Reject deep bracket nesting before the parser sees it: CPython's parser
    # turns very deep input into MemoryError/RecursionError rather than a
    # SyntaxError.
    if _bracket_depth(stripped) > MAX_DEPTH:
        raise GuardSyntaxError(f"guard expression nests brackets deeper than {MAX_DEPTH} levels")
    try:
        tree = ast.parse(stripped, mode="eval")
    except SyntaxError as e:
        col = (e.offset or 0) + (col_shift if e.lineno == 1 else 0)
        raise GuardSyntaxError(
            f"not a valid Python expression: {e.msg} (line {e.lineno}, column {col})",
            lineno=e.lineno,
            col=col,
        ) from None
    except (RecursionError, MemoryError):
        raise GuardSyntaxError(
            f"guard expression is nested too deeply to parse (limit {MAX_DEPTH} levels)"
        ) from None
    except ValueError as e:  # e.g. null bytes, over-long int literals
        raise GuardSyntaxError(f"not a valid Python expression: {e}") from None
    compiler = _Compiler(stripped, col_shift)
    fn = compiler.expr(tree.body, 0)
    return fn, frozenset(compiler.names)


def _name_order(name: str) -> tuple[int, int, str]:
    m = _PLACEHOLDER.fullmatch(name)
    return (0, int(m.group(1)), name) if m else (1, 0, name)


class Guard:
    """A compiled, immutable guard expression.

    Build one with :func:`compile_guard` (cached) or ``Guard(expr)``.

    Attributes:
        source: the expression text, exactly as given.
        names: the placeholders it reads, i.e. the keys ``k`` of every
            ``L[k]`` in the expression, ordered t0, t1, ..., t10, then others.
        arity: how many positional arguments :meth:`evaluate` needs at least
            (highest ``tN`` read, plus one; 0 if it reads none).
    """

    __slots__ = ("source", "names", "arity", "_fn", "_slots", "_unbindable")

    source: str
    names: tuple[str, ...]
    arity: int
    _fn: _Fn
    _slots: tuple[tuple[str, int], ...]
    _unbindable: tuple[str, ...]

    def __init__(self, source: str) -> None:
        """Parse and validate ``source``; raise :class:`GuardSyntaxError` if it
        is outside the allowed language."""
        fn, names = _compile(source)
        ordered = tuple(sorted(names, key=_name_order))
        slots = tuple(
            (n, int(m.group(1))) for n in ordered if (m := _PLACEHOLDER.fullmatch(n))
        )
        unbindable = tuple(n for n in ordered if not _PLACEHOLDER.fullmatch(n))
        init = object.__setattr__
        init(self, "source", source)
        init(self, "names", ordered)
        init(self, "arity", max((i for _, i in slots), default=-1) + 1)
        init(self, "_fn", fn)
        init(self, "_slots", slots)
        init(self, "_unbindable", unbindable)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Guard is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Guard is immutable")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Guard):
            return NotImplemented
        return self.source == other.source

    def __hash__(self) -> int:
        return hash((Guard, self.source))

    def __repr__(self) -> str:
        text = self.source if len(self.source) <= 120 else self.source[:117] + "..."
        return f"Guard({text!r})"

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # The compiled closures cannot be pickled; recompile from the text.
        return (compile_guard, (self.source,))

    def _bind(self, args: Sequence[object] | Mapping[str, object]) -> _Env:
        if isinstance(args, Mapping):
            for name in self.names:
                if name not in args:
                    raise _missing(name)
            return args
        if isinstance(args, (str, bytes, bytearray)) or not isinstance(args, Sequence):
            raise TypeError(
                "guard arguments must be a sequence (bound to L['t0'], L['t1'], ...) "
                f"or a mapping of placeholder names, got {type(args).__name__}"
            )
        if self._unbindable:
            raise GuardEvaluationError(
                f"guard reads {', '.join(map(_ref, self._unbindable))}, which positional "
                "arguments (bound to L['t0'], L['t1'], ...) can never provide"
            )
        if len(args) < self.arity:
            raise GuardEvaluationError(
                f"guard reads {_ref(f't{self.arity - 1}')} and so needs at least "
                f"{self.arity} argument(s), but {len(args)} were given"
            )
        return {name: args[i] for name, i in self._slots}

    def evaluate(self, args: Sequence[object] | Mapping[str, object]) -> bool:
        """Evaluate the guard; True means the guarded artifact may be used.

        ``args`` follows ``ShapeEnv.evaluate_guards_expression(code, args)``:
        positional values bound as ``L = {'t0': args[0], 't1': args[1], ...}``
        (extra trailing values are ignored, as in torch).  Alternatively pass
        the ``L`` mapping itself.  Values must be ``int``/``float``/``bool``,
        or ``torch.Tensor`` for placeholders used through ``.size()[i]``,
        ``.stride()[i]`` or ``.storage_offset()``.

        Unlike torch, every placeholder the guard mentions must be supplied even
        if short-circuiting would skip it, so a wrong argument count is always
        reported.

        Raises:
            GuardEvaluationError: missing placeholders/too few arguments, an
                argument of the wrong kind, or an arithmetic failure (division
                by zero, overflow, math domain error, size caps exceeded).
        """
        env = self._bind(args)
        try:
            return bool(self._fn(env))
        except GuardEvaluationError:
            raise
        except (ArithmeticError, TypeError, ValueError) as e:
            raise GuardEvaluationError(
                f"evaluating guard failed with {type(e).__name__}: {e}"
            ) from e


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _compile_cached(expr: str) -> Guard:
    return Guard(expr)


def compile_guard(expr: str) -> Guard:
    """Parse, validate and compile a guard expression (LRU-cached).

    Raises:
        GuardSyntaxError: the text is not in the allowed guard language; the
            message names the offending construct and its line/column.
        TypeError: ``expr`` is not a str.
    """
    if type(expr) is str and len(expr) <= _CACHEABLE_CHARS:
        return _compile_cached(expr)
    return Guard(expr)


def evaluate_guard(expr: str, args: Sequence[object] | Mapping[str, object]) -> bool:
    """``compile_guard(expr).evaluate(args)``: the eval-free equivalent of
    ``ShapeEnv.evaluate_guards_expression(expr, args)``."""
    return compile_guard(expr).evaluate(args)


def select(
    candidates: Iterable[tuple[str | None, T]],
    args: Sequence[object] | Mapping[str, object],
    *,
    on_error: Literal["raise", "skip"] = "raise",
) -> T | None:
    """Return the value of the first ``(guard, value)`` candidate whose guard
    passes for ``args``, or None if none does.

    A guard of None or ``""`` always passes, like an entry without
    ``guards_expr`` in torch's ``GuardedCache.find_guarded_entry``.  Candidates
    are consumed lazily, in order, and later guards are not compiled once one
    passes.

    ``on_error="skip"`` treats a guard that cannot be compiled or evaluated
    (:class:`GuardSyntaxError`, :class:`GuardEvaluationError`) as a miss
    instead of raising, so one corrupt entry cannot make a key unusable.
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    for expr, value in candidates:
        if not expr:
            return value
        try:
            if compile_guard(expr).evaluate(args):
                return value
        except (GuardSyntaxError, GuardEvaluationError):
            if on_error == "raise":
                raise
    return None
