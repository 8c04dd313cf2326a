"""Small real models compiled every way a user calls `torch.compile`, for the compile-modes
warm-start test (tests/test_modes.py) and bench (benches/modes.py).

Each case compiles a transformer block (pre-norm attention and an MLP, about 200k
parameters) one way: a `torch.compile` mode, dynamic shapes, fullgraph, a plain function,
a bound method, a decorated method, a `functools.partial`, a callable object, inference
mode, autocast, a training step with the optimizer step compiled. Every case has its own code object (its own subclass or
function), so no two `torch.compile` wrappers of one function meet in one process.

`DecoratedMethod` applies `@torch.compile` when this module is imported: a process that
stores it installs precompile before importing this module (torch gives a wrapper its
store entry when the wrapper is made).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

D, HEADS, HIDDEN = 128, 4, 512  # ~200k parameters: under 1 MB of fp32 weights per block


class Block(torch.nn.Module):
    """Pre-norm self-attention and an MLP, each with a residual."""

    def __init__(self) -> None:
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(D)
        self.qkv = torch.nn.Linear(D, 3 * D)
        self.proj = torch.nn.Linear(D, D)
        self.norm2 = torch.nn.LayerNorm(D)
        self.up = torch.nn.Linear(D, HIDDEN)
        self.down = torch.nn.Linear(HIDDEN, D)

    def block(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        # Attention as batched matmuls, not SDPA: on CPU, max-autotune benchmarks
        # Inductor's C++ batched-GEMM template against ATen's on them.
        scores = (q @ k.transpose(-2, -1)) * (D // HEADS) ** -0.5
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        attn = scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, D))
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))


# One subclass per case: each forward is its own code object, so its own store entry.
class MaxAutotune(Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class MaxAutotuneNoCudagraphs(Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class ReduceOverhead(Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class Dynamic(Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class MarkDynamic(Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class Fullgraph(Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class BoundMethod(Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class DecoratedMethod(Block):
    @torch.compile
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class InferenceMode(Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class AutocastBf16(Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class AutocastFp16(Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


def plain_function(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """The MLP half, as a function of its weights."""
    return x + torch.nn.functional.gelu(x @ w1) @ w2


def bound_weights(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """The MLP half again, compiled through a `functools.partial` binding its weights."""
    return x + torch.nn.functional.gelu(x @ w1) @ w2


class Runner:
    """A callable object that runs a model, as serving code wraps one."""

    def __init__(self, model: Block) -> None:
        self.model = model

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.block(x)


def _train_step(model: Block, opt: torch.optim.Optimizer, x: torch.Tensor) -> torch.Tensor:
    loss = model.block(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


Case = Callable[[str], list[torch.Tensor]]


def _model(cls: type[Block], device: str) -> Block:
    torch.manual_seed(0)
    return cls().to(device).eval()


def _x(device: str, batch: int = 2, tokens: int = 16) -> torch.Tensor:
    return torch.randn(batch, tokens, D, device=device)


def _no_grad_mode(cls: type[Block], mode: str) -> Case:
    """A `torch.compile` mode under no_grad. (Inductor's C++ GEMM template takes
    linear layers' weights only when frozen into constants, and torch stores no
    frozen graph: on CPU, max-autotune benchmarks the attention's batched matmuls.)"""

    def run(device: str) -> list[torch.Tensor]:
        fn = torch.compile(_model(cls, device), mode=mode)
        with torch.no_grad():
            # Cloned at once: under CUDA graphs (reduce-overhead, max-autotune on
            # a GPU) the next replay overwrites an output torch still owns.
            return [fn(_x(device)).clone() for _ in range(3)]

    return run


def dynamic(device: str) -> list[torch.Tensor]:
    fn = torch.compile(_model(Dynamic, device), dynamic=True)
    with torch.no_grad():
        return [fn(_x(device, batch=b, tokens=t)) for b, t in ((2, 16), (3, 9), (5, 24))]


def mark_dynamic(device: str) -> list[torch.Tensor]:
    fn = torch.compile(_model(MarkDynamic, device))
    outs = []
    with torch.no_grad():
        for b in (2, 3, 6):
            x = _x(device, batch=b)
            torch._dynamo.mark_dynamic(x, 0)
            outs.append(fn(x))
    return outs


def fullgraph(device: str) -> list[torch.Tensor]:
    fn = torch.compile(_model(Fullgraph, device), fullgraph=True)
    with torch.no_grad():
        return [fn(_x(device))]


def function(device: str) -> list[torch.Tensor]:
    torch.manual_seed(0)
    w1, w2 = torch.randn(D, HIDDEN, device=device) / D**0.5, torch.randn(HIDDEN, D, device=device) / HIDDEN**0.5
    fn = torch.compile(plain_function)
    return [fn(_x(device), w1, w2)]


def bound_method(device: str) -> list[torch.Tensor]:
    fn = torch.compile(_model(BoundMethod, device).forward)
    with torch.no_grad():
        return [fn(_x(device))]


def decorated_method(device: str) -> list[torch.Tensor]:
    model = _model(DecoratedMethod, device)
    with torch.no_grad():
        return [model(_x(device))]


def partial(device: str) -> list[torch.Tensor]:
    torch.manual_seed(0)
    w1, w2 = torch.randn(D, HIDDEN, device=device) / D**0.5, torch.randn(HIDDEN, D, device=device) / HIDDEN**0.5
    fn = torch.compile(functools.partial(bound_weights, w1=w1, w2=w2))
    return [fn(_x(device))]


def callable_object(device: str) -> list[torch.Tensor]:
    fn = torch.compile(Runner(_model(Block, device)))
    with torch.no_grad():
        return [fn(_x(device))]


def inference_mode(device: str) -> list[torch.Tensor]:
    fn = torch.compile(_model(InferenceMode, device))
    with torch.inference_mode():
        out = fn(_x(device))
    return [out.clone()]


def _autocast(cls: type[Block], dtype: torch.dtype) -> Case:
    def run(device: str) -> list[torch.Tensor]:
        fn = torch.compile(_model(cls, device))
        with torch.no_grad(), torch.autocast(device, dtype=dtype):
            return [fn(_x(device))]

    return run


def train_step(device: str) -> list[torch.Tensor]:
    """Forward, backward and the optimizer step, all in one compiled function."""
    model = _model(Block, device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = torch.compile(_train_step)
    torch.manual_seed(1)
    losses = [step(model, opt, _x(device)) for _ in range(3)]
    return losses + [p.detach().clone() for p in model.parameters()]


CASES: dict[str, Case] = {
    "max_autotune": _no_grad_mode(MaxAutotune, "max-autotune"),
    "max_autotune_no_cudagraphs": _no_grad_mode(MaxAutotuneNoCudagraphs, "max-autotune-no-cudagraphs"),
    "reduce_overhead": _no_grad_mode(ReduceOverhead, "reduce-overhead"),
    "dynamic": dynamic,
    "mark_dynamic": mark_dynamic,
    "fullgraph": fullgraph,
    "function": function,
    "bound_method": bound_method,
    "decorated_method": decorated_method,
    "partial": partial,
    "callable_object": callable_object,
    "inference_mode": inference_mode,
    "autocast_bf16": _autocast(AutocastBf16, torch.bfloat16),
    "autocast_fp16": _autocast(AutocastFp16, torch.float16),
    "train_step": train_step,
}


def available(device: str) -> list[str]:
    """The cases that run on `device`. `reduce-overhead` is a case everywhere: on CPU
    it compiles as the default mode (CUDA graphs are CUDA's). fp16 autocast is one
    where the device's autocast takes float16."""
    return [name for name in CASES if name != "autocast_fp16" or _autocast_takes(device, torch.float16)]


def _autocast_takes(device: str, dtype: torch.dtype) -> bool:
    try:
        with torch.autocast(device, dtype=dtype):
            torch.ones(2, 2, device=device) @ torch.ones(2, 2, device=device)
    except (RuntimeError, TypeError):
        return False
    return True
