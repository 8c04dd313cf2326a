"""Resource limits on guard expressions and the values they compute."""

from __future__ import annotations

from typing import Final

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
#: Longest left-associative chain of binary operators (``a + b + ...``):
#: sympy prints long sums that way, but CPython's parser only reads so many,
#: depending on the process's recursion limit, so a fixed cap keeps the
#: answer the same in every process.
MAX_CHAIN: Final = 1000
#: Most AST nodes accepted in one expression.
MAX_NODES: Final = 250_000
#: Largest ``|exponent|`` accepted for ``int ** int``: a literal beyond it is a
#: syntax error, a computed one an evaluation error.
MAX_EXPONENT: Final = 4096
#: Largest integer (in bits) that ``*``, ``**``, a literal or ``round`` may
#: produce.  Sizes are int64, so even products of dozens of sizes fit.
MAX_INT_BITS: Final = 1 << 13
