"""Source-level checks and ``ast.parse``, in front of the compiler."""

from __future__ import annotations

import ast

from ._compiler import _Compiler
from ._errors import GuardSyntaxError
from ._limits import MAX_CHAIN, MAX_DEPTH, MAX_GUARD_CHARS
from ._placeholders import _Fn


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
        raise GuardSyntaxError(f"guard expression is {len(source)} characters long; the limit is {MAX_GUARD_CHARS}")
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
        raise GuardSyntaxError(f"guard expression is nested too deeply to parse (limit {MAX_DEPTH} levels)") from None
    except ValueError as e:  # e.g. null bytes, over-long int literals
        raise GuardSyntaxError(f"not a valid Python expression: {e}") from None
    if _longest_chain(tree) > MAX_CHAIN:
        # Whether CPython's parser gets this far depends on the recursion
        # limit of the process; the answer must not.
        raise GuardSyntaxError(f"guard expression is nested too deeply to parse (limit {MAX_DEPTH} levels)")
    compiler = _Compiler(stripped, col_shift)
    fn = compiler.expr(tree.body, 0)
    return fn, frozenset(compiler.names)


def _longest_chain(tree: ast.AST) -> int:
    """The longest run of binary operators each the left operand of the next."""
    nodes = [n for n in ast.walk(tree) if isinstance(n, ast.BinOp)]
    inner = {id(n.left) for n in nodes if isinstance(n.left, ast.BinOp)}
    longest = 0
    for top in nodes:
        if id(top) in inner:
            continue
        length = 0
        cur: ast.expr = top
        while isinstance(cur, ast.BinOp):
            length += 1
            cur = cur.left
        longest = max(longest, length)
    return longest
