"""The allowlisted operators, the names given to refused constructs, and small
matchers for the AST shapes torch's printer emits."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any, Final

from ._functions import _mul, _pow

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
