"""The allowlisted functions and constants a guard may use, and the capped
arithmetic helpers behind ``*``, ``**`` and ``round``."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any, Final

from ._errors import GuardEvaluationError
from ._limits import MAX_EXPONENT, MAX_INT_BITS

# ---------------------------------------------------------------------------
# Runtime helpers.  Every value flowing through a compiled guard is a builtin
# int/float/bool (or complex, which Python's ``**`` can produce from a negative
# base); arguments are checked on load, so operators never dispatch to
# user-defined ``__dunder__`` methods.
# ---------------------------------------------------------------------------


def _is_int(v: object) -> bool:
    t = type(v)
    return t is int or t is bool


def _mul(a: Any, b: Any) -> Any:
    if _is_int(a) and _is_int(b) and a.bit_length() + b.bit_length() > MAX_INT_BITS + 1:
        raise GuardEvaluationError(f"integer product exceeds {MAX_INT_BITS} bits; refusing to compute it")
    return a * b


def _pow(a: Any, b: Any) -> Any:
    # |a| <= 1 is cheap for any exponent; everything else is capped so a
    # guard cannot ask for 10**10**9.
    if _is_int(a) and _is_int(b) and abs(a) > 1:
        if abs(b) > MAX_EXPONENT:
            raise GuardEvaluationError(f"exponent {b} exceeds the cap of {MAX_EXPONENT}")
        if b > 0 and (a.bit_length() - 1) * b > MAX_INT_BITS:
            raise GuardEvaluationError(f"{a} ** {b} exceeds {MAX_INT_BITS} bits; refusing to compute it")
    return a**b


def _round(x: Any, ndigits: Any = None) -> Any:
    if ndigits is None:
        return round(x)
    # round(int, -n) computes 10**n internally.
    if _is_int(ndigits) and abs(ndigits) > MAX_EXPONENT:
        raise GuardEvaluationError(f"round() ndigits {ndigits} exceeds the cap of {MAX_EXPONENT}")
    return round(x, ndigits)


def _sym_minmax(pick: Callable[..., Any], name: str) -> Callable[[Any, Any], Any]:
    # Mirrors torch.sym_max/sym_min on plain numbers: only int/float (bool is
    # an int) are accepted, and the result is promoted to float if either
    # argument is a float -- unlike builtins.max, which keeps the winner's type.
    def fn(a: Any, b: Any) -> Any:
        for v in (a, b):
            if not isinstance(v, (int, float)):
                raise GuardEvaluationError(f"torch.{name} expects int or float, got {type(v).__name__}")
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
        raise GuardEvaluationError(f"cast_symbool_to_symint_guardless expects a bool, got {type(x).__name__}")
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
