"""The compiler from a validated ``ast`` expression to a tree of closures."""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from ._errors import GuardSyntaxError
from ._functions import _CONSTANTS, _FUNCTIONS
from ._limits import MAX_DEPTH, MAX_EXPONENT, MAX_INT_BITS, MAX_NODES
from ._placeholders import _Env, _Fn, _scalar_loader, _tensor_prop_loader
from ._syntax import (
    _BINOPS,
    _CMPOPS,
    _DESCRIPTIONS,
    _OP_DESCRIPTIONS,
    _TENSOR_PROPS,
    _UNARYOPS,
    _dotted,
    _int_literal,
)


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
            f"{what} is not allowed in a guard expression{where}{snippet}" + (f" ({hint})" if hint else ""),
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
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in _TENSOR_PROPS:
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
        if (
            isinstance(func, ast.Attribute)
            and func.attr in _TENSOR_PROPS
            and self.placeholder_name(func.value) is not None
        ):
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
