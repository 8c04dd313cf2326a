"""What the torch-contract tests share: the functions they compile, and a reset to a fresh process's state."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch._dynamo.precompile_context import PrecompileContext


@torch.library.custom_op("precompile_tests::times", mutates_args=())
def times(x: torch.Tensor, factor: float) -> torch.Tensor:
    """A custom op, as serving code defines its kernels: Dynamo guards the
    type of the global that holds it."""
    return x * factor


@times.register_fake
def _(x: torch.Tensor, factor: float) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("precompile_tests::plus", mutates_args=())
def plus(x: torch.Tensor, amount: float) -> torch.Tensor:
    """Another custom op, of the same Python type as `times`."""
    return x + amount


@plus.register_fake
def _(x: torch.Tensor, amount: float) -> torch.Tensor:
    return torch.empty_like(x)


def times_three_sin(x: torch.Tensor) -> torch.Tensor:
    return times(x, 3.0).sin()


def reset_loaded_entries() -> None:
    # Loaded entries live on the code objects, which outlive a test; some
    # torch releases keep them across torch._dynamo.reset(). Another process
    # would not have them.
    from torch._C._dynamo.eval_frame import _reset_precompile_entries

    for fn in functions():
        _reset_precompile_entries(fn.__code__)


def reset() -> None:
    """Forget what Dynamo compiled, recorded and loaded: a new process, as far as Dynamo can tell."""
    torch._dynamo.reset()
    PrecompileContext.clear()
    reset_loaded_entries()


def functions() -> tuple:
    """The functions the tests compile (their code objects are shared)."""

    def sin_cos(x: torch.Tensor) -> torch.Tensor:
        return x.sin() + x.cos()

    def cos_plus(x: torch.Tensor) -> torch.Tensor:
        return x.cos() + x

    def with_break(x: torch.Tensor) -> torch.Tensor:
        y = x.sin() * 2
        torch._dynamo.graph_break()
        return y.cos() + 1

    return sin_cos, cos_plus, with_break


def saved_sin_cos() -> tuple:
    """`sin_cos` compiled, saved and forgotten: the function, its input and
    its eager output."""
    _sin_cos, _cos_plus, _with_break = functions()
    x = torch.randn(3, 2)
    expected = _sin_cos(x)
    torch.compile(_sin_cos)(x)
    PrecompileContext.save_to_dynamo_cache()
    reset()
    return _sin_cos, x, expected


def forget(*fns: Callable[..., object]) -> None:
    """`reset()` for the functions `fns` a test compiled, and torch's counters cleared."""
    from torch._C._dynamo.eval_frame import _reset_precompile_entries
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    PrecompileContext.clear()
    for fn in fns:
        _reset_precompile_entries(fn.__code__)
    counters.clear()


class Unpicklable:
    """A value no pickler takes: a guard state reaching it cannot be saved."""

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("cannot pickle 'Unpicklable' object")


class WithUnpicklable:
    """An argument whose guarded attribute is plain data, beside one that cannot be pickled."""

    def __init__(self) -> None:
        self.scale = 2.0
        self.opaque = Unpicklable()


def scaled_by(x: torch.Tensor, holder: WithUnpicklable) -> torch.Tensor:
    return x * holder.scale
