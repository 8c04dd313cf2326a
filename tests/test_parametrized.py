"""Models with parametrized weights warm-start a fresh host.

`weight_norm`, `spectral_norm` and any `register_parametrization` give the
module a class made at run time whose `__getstate__` raises, so torch
bypassed every frame that reads one (wav2vec2's positional convolution,
weight-normed vocoders). The store saves such a module as its original
class and parametrized tensor names, and checks on load that the live
module is parametrized the same way: a fresh process (fresh Inductor and
Triton caches, a compiler spy on PATH) compiles nothing and computes the
same outputs, and one whose model is parametrized otherwise compiles.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.counters import counter, miss_counters
from support.warm_start import assert_compiled_nothing, assert_same_outputs, run_scenario

pytestmark = pytest.mark.torch

PROGRAM = Path(__file__).resolve().parent / "programs" / "parametrized.py"


def _run(name: str, mode: str, store: Path, work: Path) -> dict:
    return run_scenario(name, mode, store, work, program=PROGRAM)


def _stored(a: dict) -> None:
    """The compiling side stored the frame rather than bypassing it."""
    assert "package bypass" not in a["stderr"], a["stderr"][-3000:]
    assert "Serialization of parametrized modules" not in a["stderr"], a["stderr"][-3000:]


@pytest.mark.parametrize("name", ["weight_norm", "spectral_norm", "custom", "custom_twice", "legacy_weight_norm"])
def test_parametrized_model_warm_starts(name: str, tmp_path: Path) -> None:
    store = tmp_path / "store"
    a = _run(name, "compile", store, tmp_path)
    _stored(a)
    compiled, eager = a["outputs"]
    torch.testing.assert_close(compiled, eager)
    b = _run(name, "load", store, tmp_path)
    assert_same_outputs(a["outputs"], b["outputs"])
    assert_compiled_nothing(b)
    assert miss_counters(b) == {}, b["counters"]


@pytest.mark.parametrize(("name", "variant"), [("custom", "other"), ("custom", "plain"), ("weight_norm", "plain")])
def test_a_model_parametrized_otherwise_is_a_miss(name: str, variant: str, tmp_path: Path) -> None:
    """The stored entry is found and refused by its guards; the frame compiles
    and computes what eager computes for the loading side's model."""
    store = tmp_path / "store"
    _stored(_run(name, "compile", store, tmp_path))
    b = _run(name, f"load-{variant}", store, tmp_path)
    assert counter(b, "precompile", "miss_guard_failed") == 1, b["counters"]
    assert counter(b, "inductor", "fxgraph_cache_miss") + counter(b, "inductor", "fxgraph_cache_hit") >= 1
    compiled, eager = b["outputs"]
    torch.testing.assert_close(compiled, eager)
