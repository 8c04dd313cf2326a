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

from ._errors import GuardEvaluationError, GuardSyntaxError
from ._guard import Guard, compile_guard, evaluate_guard, select
from ._limits import MAX_DEPTH, MAX_EXPONENT, MAX_GUARD_CHARS, MAX_INT_BITS

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

# Keep the public names reporting the package as their home, as they did when
# this was one module: reprs, tracebacks and pickles of Guard (which refer to
# compile_guard) then name precompile.guards, not a private submodule.
for _obj in (Guard, GuardEvaluationError, GuardSyntaxError, compile_guard, evaluate_guard, select):
    _obj.__module__ = __name__
del _obj
