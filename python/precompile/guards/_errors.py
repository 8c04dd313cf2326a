"""The two exceptions guard compilation and evaluation raise."""

from __future__ import annotations


class GuardSyntaxError(ValueError):
    """The expression is not valid guard syntax or uses a construct outside the
    allowlist (unknown name or function, attribute access, lambda, ...).

    ``lineno``/``col`` (1-based) locate the offending construct when known.
    """

    def __init__(self, message: str, *, lineno: int | None = None, col: int | None = None) -> None:
        super().__init__(message)
        self.lineno = lineno
        self.col = col


class GuardEvaluationError(ValueError):
    """A well-formed guard could not be evaluated against the given arguments:
    too few arguments, a placeholder that was not supplied, an argument of the
    wrong kind, or an arithmetic failure (division by zero, overflow, math
    domain error, a result over the size caps)."""
