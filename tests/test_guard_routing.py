"""torch's caches pick among guarded entries with precompile.guards, not eval."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.counters import counter
from support.warm_start import run_scenario

import precompile

torch = pytest.importorskip("torch")
from torch._dynamo.utils import counters  # noqa: E402
from torch.fx.experimental.symbolic_shapes import ShapeEnv  # noqa: E402

pytestmark = pytest.mark.torch


def test_installed_store_evaluates_guard_strings_itself(tmp_path: Path) -> None:
    original = ShapeEnv.evaluate_guards_expression
    counters.clear()
    with precompile.installed(tmp_path / "store", save_on_exit=False):
        env = ShapeEnv()
        assert env.evaluate_guards_expression("L['t0'] >= 2 and L['t0'] % 2 == 0", [4]) is True
        assert env.evaluate_guards_expression("L['t0'] >= 2 and L['t0'] % 2 == 0", [3]) is False
        assert counters["precompile"]["guard_evaluations"] == 2
        # A string that is not a guard is refused, which reads as a miss.
        hostile = "__import__('os').system('touch " + str(tmp_path / "pwned") + "')"
        assert env.evaluate_guards_expression(hostile, [1]) is False
        assert counters["precompile"]["guards_refused"] == 1
        assert not (tmp_path / "pwned").exists()
    assert ShapeEnv.evaluate_guards_expression is original


def test_fx_graph_cache_hits_are_chosen_by_precompile_guards(tmp_path: Path) -> None:
    # The first process fills Inductor's caches with dynamic-shape entries;
    # the second, with the same Inductor cache dir but an empty store,
    # compiles through those caches, which choose entries by guard string
    # (the FX-graph cache, or on some releases the AOTAutograd cache first).
    run_scenario("dynamic", "compile", tmp_path / "store1", tmp_path)
    second = run_scenario("dynamic", "compile", tmp_path / "store2", tmp_path)
    hits = counter(second, "inductor", "fxgraph_cache_hit") + counter(second, "aot_autograd", "autograd_cache_hit")
    assert hits >= 1, second["counters"]
    assert counter(second, "precompile", "guard_evaluations") >= 1, second["counters"]
    assert counter(second, "precompile", "guards_refused") == 0
