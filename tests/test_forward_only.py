"""A training graph whose backward never ran warm-starts.

With parameters that require grad and grad mode on (the README's sample as
written), torch.compile builds training graphs, and AOTAutograd compiles
each backward only when backward first runs. A first process that only runs
forward must still store every graph: a fresh process (fresh Inductor and
Triton caches, a compiler spy on PATH) compiles nothing, computes the same
outputs and, when it does run backward, gets eager's gradients.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.counters import counter
from support.warm_start import assert_compiled_nothing, assert_same_outputs, run_scenario

import precompile

pytestmark = pytest.mark.torch

PROGRAM = Path(__file__).resolve().parent / "programs" / "forward_only.py"


def _run(name: str, mode: str, store: Path, work: Path, env: dict[str, str] | None = None) -> dict:
    return run_scenario(name, mode, store, work, extra_env=env, program=PROGRAM)


def _assert_backward_compiled_at_save(a: dict) -> None:
    assert counter(a, "precompile", "backward_compiled_at_save") >= 1, a["counters"]
    assert counter(a, "precompile", "missing_backend") == 0, a["stderr"][-3000:]
    assert "never recorded" not in a["stderr"]


def test_readme_sample_as_written_warm_starts(tmp_path: Path) -> None:
    store = tmp_path / "store"
    a = _run("readme", "compile", store, tmp_path)
    _assert_backward_compiled_at_save(a)
    assert a["compiler_runs"], "the first process compiles"
    # The sample's install() used the default store, which is this test's.
    assert precompile.Store(str(store)).refs("dynamo/"), "the entry is in the test's store"
    b = _run("readme", "load", store, tmp_path)
    assert len(b["outputs"]) == 1
    assert_same_outputs(a["outputs"], b["outputs"])
    assert_compiled_nothing(b)


def test_forward_at_several_shapes_saved_at_exit_warm_starts(tmp_path: Path) -> None:
    store = tmp_path / "store"
    a = _run("shapes", "compile-at-exit", store, tmp_path)
    assert a["report"] is None  # saved by install()'s hook at interpreter exit
    assert "PrecompileWarning" not in a["stderr"], a["stderr"][-3000:]
    (entry,) = precompile.Store(str(store)).refs("dynamo/")
    b = _run("shapes", "load", store, tmp_path)
    assert_same_outputs(a["outputs"], b["outputs"])
    assert_compiled_nothing(b)
    assert counter(b, "dynamo_cache", "dynamo_cache_hit") == 1, entry


def test_backward_in_a_later_process_loads_and_matches_eager(tmp_path: Path) -> None:
    store = tmp_path / "store"
    a = _run("backward", "compile", store, tmp_path)
    _assert_backward_compiled_at_save(a)
    assert a["report"]["missing_backends"] == 0
    b = _run("backward", "load", store, tmp_path)
    out, expected, *grads = b["outputs"]
    assert_same_outputs(a["outputs"], [out])
    torch.testing.assert_close(out, expected)
    half = len(grads) // 2
    for grad, eager_grad in zip(grads[:half], grads[half:]):
        torch.testing.assert_close(grad, eager_grad)
    # The backward came from the store with the forward.
    assert_compiled_nothing(b)


def _tanh_weighted(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x * w).tanh().sum(0)


def test_a_backward_that_fails_at_save_is_reported_and_compiles_when_backward_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No C++ compiler at the save: the graph is saved without its backend,
    with a warning, and a later backward call compiles as torch does."""
    from support.torch_contract import forget
    from torch._dynamo.utils import counters
    from torch._inductor import config

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    forget(_tanh_weighted)
    x, w = torch.randn(3, 4), torch.randn(4, requires_grad=True)
    try:
        with precompile.installed(tmp_path / "store", save_on_exit=False):
            out = torch.compile(_tanh_weighted)(x, w)
            no_compiler = config.patch({"cpp.cxx": (None, str(tmp_path / "no-such-c++"))})
            with no_compiler, pytest.warns(precompile.PrecompileWarning) as warned:
                report = precompile.save()
            messages = [str(w.message) for w in warned]
            assert any(m.startswith("_tanh_weighted: compiling the backward") and "C++" in m for m in messages), (
                messages
            )
            assert any("never recorded" in m for m in messages), messages
            assert report.missing_backends == 1
            assert counters["precompile"]["backward_compile_failed"] == 1
            out.sum().backward()
            assert w.grad is not None
            torch.testing.assert_close(w.grad, (x * (1 - (x * w.detach()).tanh() ** 2)).sum(0))
    finally:
        forget(_tanh_weighted)
