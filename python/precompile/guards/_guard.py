"""The :class:`Guard` object, its compile cache, and the public entry points
:func:`compile_guard`, :func:`evaluate_guard` and :func:`select`."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal, TypeVar

from ._errors import GuardEvaluationError, GuardSyntaxError
from ._parser import _compile
from ._placeholders import _Env, _Fn, _missing, _ref

T = TypeVar("T")

# Expressions longer than this are compiled but not kept in the LRU cache, so
# the cache's memory stays bounded by roughly maxsize * this many characters.
_CACHEABLE_CHARS: Final = 1 << 16
_CACHE_SIZE: Final = 1024

_PLACEHOLDER = re.compile(r"t(0|[1-9][0-9]*)")


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
        slots = tuple((n, int(m.group(1))) for n in ordered if (m := _PLACEHOLDER.fullmatch(n)))
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
            raise GuardEvaluationError(f"evaluating guard failed with {type(e).__name__}: {e}") from e


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
