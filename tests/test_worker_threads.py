"""A model first called from worker threads is stored and warm-starts there.

Newer torch keeps each config assignment per thread, so `caching_precompile`
set by `install()` in the main thread was off in the threads of a serving
process's request pool: their compiles recorded nothing and their calls
looked nothing up (torch's own store alike). `install()` turns it on for
every thread, and a fresh process serving from worker threads compiles
nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.counters import counter
from support.warm_start import assert_same_outputs, run_scenario

pytestmark = pytest.mark.torch

PROGRAM = Path(__file__).resolve().parent / "programs" / "worker_thread.py"


@pytest.mark.parametrize("name", ["one", "pool"])
def test_first_calls_in_worker_threads_save_and_load(name: str, tmp_path: Path) -> None:
    store = tmp_path / "store"
    a = run_scenario(name, "compile", store, tmp_path, program=PROGRAM)
    assert a["graphs"] >= 1, a["counters"]
    # Both models are of one class: one function, one entry.
    assert len(a["report"]) == 1, a["report"]
    b = run_scenario(name, "load", store, tmp_path, program=PROGRAM)
    # Each wrapper looks its function up when it is made.
    assert counter(b, "dynamo_cache", "dynamo_cache_hit") == 2, b["counters"]
    assert b["graphs"] == 0, b["counters"]
    assert b["compiler_runs"] == [], b["compiler_runs"]
    assert_same_outputs(a["outputs"], b["outputs"])
