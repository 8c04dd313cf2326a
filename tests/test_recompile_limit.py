"""A fresh process stops at Dynamo's recompile limit where the compiling process stopped.

torch counts only the variants it compiled in this process toward
`recompile_limit`, not those it loaded: a fresh process that loaded the
variants a compiling process stopped at would compile as many again, for the
very calls the compiling process ran eagerly. Installed, loaded variants
count: the fresh process serves what was stored, runs the rest eagerly as
the compiling process did, and compiles nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.counters import counter
from support.warm_start import assert_compiled_nothing, assert_same_outputs, run_scenario

from precompile.miss_log import read_records

pytestmark = pytest.mark.torch


def test_loaded_variants_count_toward_the_recompile_limit(tmp_path: Path) -> None:
    store = tmp_path / "store"
    cold = run_scenario("recompile_limit", "compile", store, tmp_path)
    assert counter(cold, "stats", "unique_graphs") == 2, cold["counters"]
    assert "hit config.recompile_limit" in cold["stderr"], cold["stderr"][-3000:]
    warm = run_scenario("recompile_limit", "load", store, tmp_path)
    # Bit for bit: the two stored variants serve their shapes, and the other
    # two run eagerly, as in the compiling process.
    assert_same_outputs(warm["outputs"], cold["outputs"])
    assert_compiled_nothing(warm)
    assert counter(warm, "stats", "unique_graphs") == 0, warm["counters"]
    assert counter(warm, "precompile", "frames_loaded") == 2, warm["counters"]
    assert "hit config.recompile_limit" in warm["stderr"], warm["stderr"][-3000:]
    # The store reports the calls its variants rejected, and that they ran
    # eagerly: a miss, but no frame recompiled.
    assert counter(warm, "precompile", "frames_recompiled") == 0, warm["counters"]
    assert counter(warm, "precompile", "miss_guard_failed") >= 1, warm["counters"]
    misses = [r for r in read_records(str(store)) if r["event"] == "miss"]
    assert misses and all(r["reason"] == "guard_failed" for r in misses), misses
    assert all("reach recompile_limit (2), so it runs eagerly" in r["detail"] for r in misses), misses
