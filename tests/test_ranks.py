"""One compile for every rank: the ranks of a real gloo job on CPU share a store, one compiles, the others load.

`programs/ranks.py` runs each rank as its own process, as torchrun would:
`DistributedDataParallel` around a compiled transformer block (one training
step), and the block sharded by tensor parallelism (its graph holds the
all-reduce). The compiling rank saves the entry before its compiled code runs,
so the waiting ranks never leave a collective of that code waiting.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from support.counters import counter
from support.ranks import run_ranks

pytestmark = [pytest.mark.torch, pytest.mark.slow]


def _close(a: list[Any], b: list[Any]) -> bool:
    flat_a = [x for row in a for x in (row if isinstance(row, list) else [row])]
    flat_b = [x for row in b for x in (row if isinstance(row, list) else [row])]
    return len(flat_a) == len(flat_b) and all(
        math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-6) for x, y in zip(flat_a, flat_b, strict=True)
    )


def _compiled(rank: dict[str, Any]) -> int:
    return counter(rank, "stats", "unique_graphs")


def _served_without_compiling(rank: dict[str, Any]) -> None:
    """A rank that compiled nothing: no Dynamo graph, no AOTAutograd run (a
    backward compiled at its first call would be one), and its code loaded."""
    assert _compiled(rank) == 0, rank["counters"]
    assert counter(rank, "aot_autograd", "total") == 0, rank["counters"]
    assert counter(rank, "precompile", "frames_loaded") >= 1, rank["counters"]


@pytest.fixture(scope="module")
def ddp_job(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    work = tmp_path_factory.mktemp("ddp")
    store = work / "store"
    first = run_ranks(store, "ddp", 2, work / "inductor-first")
    # Another 2-rank host: the same store, nothing in its Inductor cache.
    fresh = run_ranks(store, "ddp", 2, work / "inductor-fresh")
    return {"first": first, "fresh": fresh}


def test_ddp_one_rank_compiles_and_the_other_loads_its_entry(ddp_job: dict[str, list[dict[str, Any]]]) -> None:
    first = ddp_job["first"]
    compiling = [r for r in first if _compiled(r)]
    assert len(compiling) == 1, [r["counters"] for r in first]
    assert counter(compiling[0], "precompile", "single_flight_saves") == 1, compiling[0]["counters"]
    (other,) = [r for r in first if not _compiled(r)]
    _served_without_compiling(other)
    assert counter(other, "precompile", "compile_waits_served") == 1, other["counters"]
    assert counter(other, "precompile", "compile_wait_timeouts") == 0, other["counters"]


def test_ddp_ranks_agree_and_a_fresh_host_compiles_nothing(ddp_job: dict[str, list[dict[str, Any]]]) -> None:
    first, fresh = ddp_job["first"], ddp_job["fresh"]
    for rank in fresh:
        _served_without_compiling(rank)
        assert counter(rank, "precompile", "compile_waits") == 0, rank["counters"]
    # DDP keeps the replicas equal: the same loss and the same parameters
    # after the step on every rank, and on the fresh host as on the first.
    for rank in [*first, *fresh]:
        assert _close(rank["result"], first[0]["result"]), (rank["result"], first[0]["result"])
        assert _close(rank["params"], first[0]["params"])


@pytest.fixture(scope="module")
def tp_job(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("tp")
    store = work / "store"
    two = run_ranks(store, "tp", 2, work / "inductor-2")
    fresh = run_ranks(store, "tp", 2, work / "inductor-2-fresh")
    return {"store": store, "work": work, "two": two, "fresh": fresh}


def _skip_where_torch_caches_no_backend(tp_job: dict[str, Any]) -> None:
    """torch 2.11's AOTAutogradCache bypasses a graph of DTensors: torch
    records no backend for it, so no store can serve the frame there."""
    if any(counter(r, "aot_autograd", "autograd_cache_bypass") for r in tp_job["two"]):
        pytest.skip("this torch's AOTAutogradCache bypasses the tensor-parallel graph: no backend is recorded")


def test_tensor_parallel_ranks_compile_once(tp_job: dict[str, Any]) -> None:
    _skip_where_torch_caches_no_backend(tp_job)
    two, fresh = tp_job["two"], tp_job["fresh"]
    assert sum(_compiled(r) for r in two) == 1, [r["counters"] for r in two]
    (other,) = [r for r in two if not _compiled(r)]
    _served_without_compiling(other)
    for rank in fresh:
        _served_without_compiling(rank)
    for rank in [*two, *fresh]:
        assert _close(rank["result"], two[0]["result"]), (rank["result"], two[0]["result"])


def test_an_entry_for_another_world_size_is_a_clear_miss(tp_job: dict[str, Any]) -> None:
    """Each of 4 ranks holds a quarter of the weights the 2-rank graph was
    compiled for: the stored guards refuse the call, and the rank compiles
    and computes the same block, no crash."""
    _skip_where_torch_caches_no_backend(tp_job)
    four = run_ranks(tp_job["store"], "tp", 4, tp_job["work"] / "inductor-4")
    for rank in four:
        assert counter(rank, "precompile", "miss_guard_failed") == 1, rank["counters"]
        assert _compiled(rank) == 1, rank["counters"]
        assert _close(rank["result"], tp_job["two"][0]["result"]), rank["result"]


def test_a_module_compiled_under_ddp_optimizer_says_why_it_is_not_stored(tmp_path: Path) -> None:
    """torch's default DDPOptimizer drops the wrapper's package: every run
    compiles again, and each rank's misses name the setting that stores it."""
    store = tmp_path / "store"
    for run in ("first", "second"):
        for rank in run_ranks(store, "ddp_optimizer", 2, tmp_path / f"inductor-{run}"):
            assert _compiled(rank) >= 1, rank["counters"]
            assert counter(rank, "precompile", "miss_unstorable") == 1, rank["counters"]
            assert "optimize_ddp = False" in rank["stderr"], rank["stderr"][-3000:]
