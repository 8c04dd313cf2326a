"""What the torch-contract tests share: the functions they compile, and a reset to a fresh process's state."""

from __future__ import annotations

import torch
from torch._dynamo.precompile_context import PrecompileContext


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
