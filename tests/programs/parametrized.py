"""One side of a warm-start test of a model with parametrized weights, run as a subprocess.

    python parametrized.py NAME compile|load|load-VARIANT STORE OUT_JSON

NAME picks how the model's weights are parametrized (`MODELS`); `load-VARIANT`
builds the loading side's model with another parametrization (`VARIANTS`),
to show a stored entry does not serve it. Each side returns the compiled
output and eager's; `compile` then saves. Writes the outputs (OUT_JSON.pt)
and the counters (OUT_JSON) as tests/programs/scenario.py does.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import torch
from torch.nn.utils import parametrizations, parametrize

import precompile


class Symmetric(torch.nn.Module):
    """A custom parametrization: the weight is symmetric."""

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return w.triu() + w.triu(1).transpose(0, 1)


class Scaled(torch.nn.Module):
    """Another custom parametrization, for a loading side that differs."""

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return w * 0.5


class Net(torch.nn.Module):
    """A convolution and a square linear layer, as an audio encoder's front end has."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 8, 3, padding=1)
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(torch.nn.functional.gelu(self.conv(x)).transpose(1, 2))


def _weight_norm(net: Net) -> Net:
    parametrizations.weight_norm(net.conv, dim=2)
    return net


def _spectral_norm(net: Net) -> Net:
    parametrizations.spectral_norm(net.proj)
    return net.eval()  # eval: the power iteration's vectors stay put


def _custom(net: Net) -> Net:
    parametrize.register_parametrization(net.proj, "weight", Symmetric())
    return net


def _custom_twice(net: Net) -> Net:
    """Two parametrizations on the weight, one on the bias."""
    parametrize.register_parametrization(net.proj, "weight", Symmetric())
    parametrize.register_parametrization(net.proj, "weight", Scaled())
    parametrize.register_parametrization(net.proj, "bias", Scaled())
    return net


def _legacy_weight_norm(net: Net) -> Net:
    torch.nn.utils.weight_norm(net.conv)  # the deprecated hook-based one
    return net


def _other_custom(net: Net) -> Net:
    parametrize.register_parametrization(net.proj, "weight", Scaled())
    return net


def _plain(net: Net) -> Net:
    return net


MODELS: dict[str, Callable[[Net], Net]] = {
    "weight_norm": _weight_norm,
    "spectral_norm": _spectral_norm,
    "custom": _custom,
    "custom_twice": _custom_twice,
    "legacy_weight_norm": _legacy_weight_norm,
}
VARIANTS: dict[str, Callable[[Net], Net]] = {"other": _other_custom, "plain": _plain}


def main() -> None:
    name, mode, store, out_path = sys.argv[1:5]
    from torch._dynamo.utils import counters

    precompile.install(store, save_on_exit=False)
    build = VARIANTS[mode.removeprefix("load-")] if mode.startswith("load-") else MODELS[name]
    # Built twice from one seed: the hook-based weight_norm cannot be deep-copied.
    torch.manual_seed(0)
    model = build(Net())
    torch.manual_seed(0)
    eager = build(Net())
    x = torch.randn(2, 4, 16)
    with torch.no_grad():
        outputs = [torch.compile(model)(x), eager(x)]
    if mode == "compile":
        precompile.save()
    torch.save(outputs, out_path + ".pt")
    with open(out_path, "w") as f:
        json.dump({"counters": {k: dict(v) for k, v in counters.items()}}, f)


if __name__ == "__main__":
    main()
