"""Models the benchmarks compile: small enough for a 2-core CPU, real layers."""

from __future__ import annotations

import torch


class MLP(torch.nn.Module):
    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(width, 4 * width),
            torch.nn.GELU(),
            torch.nn.Linear(4 * width, width),
            torch.nn.LayerNorm(width),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Transformer(torch.nn.Module):
    """A 4-layer encoder, as serving stacks compile it."""

    def __init__(self, d_model: int = 64, layers: int = 4) -> None:
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(
            d_model, nhead=4, dim_feedforward=4 * d_model, batch_first=True, dropout=0.0
        )
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


class ConvNet(torch.nn.Module):
    """A small image classifier: convolutions, pooling and a linear head."""

    def __init__(self, channels: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, channels, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(channels, 2 * channels, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
        )
        self.head = torch.nn.Linear(2 * channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


class _Mixer(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        return x + torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, -1) @ v


class _FeedForward(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


class Regional(torch.nn.Module):
    """Alternating blocks of two classes, each compiled on its own with
    `Module.compile()` (regional compilation): every block's wrapper is of
    `Module._call_impl`, one lineage for all."""

    def __init__(self, width: int = 64, pairs: int = 4) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(block for _ in range(pairs) for block in (_Mixer(width), _FeedForward(width)))

    def compile_blocks(self) -> None:
        for block in self.blocks:
            block.compile()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def build(name: str, device: str) -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    if name == "mlp":
        model, x = MLP(), torch.randn(32, 64)
    elif name == "transformer":
        model, x = Transformer(), torch.randn(4, 16, 64)
    elif name == "convnet":
        model, x = ConvNet(), torch.randn(8, 3, 32, 32)
    elif name == "regional":
        model, x = Regional(), torch.randn(4, 16, 64)
    else:
        raise ValueError(f"unknown model {name!r}")
    # Train mode with dropout 0 computes the same thing as eval mode but keeps
    # PyTorch's fused inference path for transformer layers out of the way,
    # so Inductor generates the model's kernels instead of calling one op.
    return model.to(device).train(), x.to(device)


def shared_kernel_module(k: int, directory: str) -> str:
    """Write a module of K distinct functions that compile to identical kernels.

    They are separate functions in a real file (Dynamo keys entries by
    function and checks their source), computing the same thing, as K models
    built from the same blocks do. Returns the module name.
    """
    lines = ["import torch", ""]
    for i in range(k):
        lines += [
            f"def block_{i}(x, w1, w2):",
            "    h = torch.nn.functional.gelu(x @ w1)",
            "    return torch.nn.functional.layer_norm(h @ w2, (w2.shape[1],))",
            "",
        ]
    with open(f"{directory}/shared_blocks.py", "w") as f:
        f.write("\n".join(lines))
    return "shared_blocks"


def breaks_module(n: int, directory: str) -> str:
    """Write a module whose model is N identical blocks called one by one,
    with a graph break after each: the shape of a large model with an
    unsupported op between its layers. Every block after a break starts a
    new frame and a new graph, all equal. Returns the module name.
    """
    lines = [
        "import torch",
        "",
        "",
        "class Block(torch.nn.Module):",
        "    def __init__(self, d=64):",
        "        super().__init__()",
        "        self.norm = torch.nn.LayerNorm(d)",
        "        self.up = torch.nn.Linear(d, 4 * d)",
        "        self.down = torch.nn.Linear(4 * d, d)",
        "",
        "    def forward(self, x):",
        "        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))",
        "",
        "",
        "class Breaky(torch.nn.Module):",
        "    def __init__(self):",
        "        super().__init__()",
        f"        self.blocks = torch.nn.ModuleList(Block() for _ in range({n}))",
        "",
        "    def forward(self, x):",
    ]
    for i in range(n):
        lines += [f"        x = self.blocks[{i}](x)", "        torch._dynamo.graph_break()"]
    lines += ["        return x", ""]
    name = f"breaky_{n}"
    with open(f"{directory}/{name}.py", "w") as f:
        f.write("\n".join(lines))
    return name
