"""Every compile mode and call style warm-starts a fresh host.

benches/mode_cases.py compiles a small transformer block every way a user calls
`torch.compile`: `mode="max-autotune"`, `"max-autotune-no-cudagraphs"` and
`"reduce-overhead"`, `dynamic=True`, `mark_dynamic`, `fullgraph=True`, a plain function,
a bound method, a decorated method, a `functools.partial`, a callable object (both of
which torch alone cannot key: AttributeError), under `inference_mode`, under bf16 and fp16
autocast, and a training step with the optimizer step compiled. All cases run in one
cold process, then in one fresh process that has only the store (new Inductor and
Triton cache dirs, a compiler spy on PATH). Per case, the outputs must be identical
and the fresh process must compile nothing: no FX-graph or AOTAutograd cache miss, no
recompiled frame, no miss, no compiler run, and no autotuning benchmark. One case
does not warm-start whole yet (`_UNSERVED`, a strict xfail, with its cause).

On CUDA the same file runs the GPU modes (CUDA graphs for `reduce-overhead`, Triton
templates for max-autotune).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from support.counters import counter
from support.warm_start import run_scenario

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benches"))
import mode_cases

pytestmark = [pytest.mark.torch, pytest.mark.slow, pytest.mark.timeout(1800)]

PROGRAM = Path(__file__).parent / "programs" / "modes.py"
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
CASES = mode_cases.available(DEVICE)
AUTOTUNED = ("max_autotune", "max_autotune_no_cudagraphs")

# Cases the fresh process cannot serve whole yet, with the miss they get.
_UNSERVED = {
    # The optimizer step's graph holds the parameters as graph attributes
    # (static addresses): torch bypasses that frame at save ("Graph contains
    # named parameters"), so it compiles again; the step's other frames load.
    # Lifting them to graph inputs would not serve it either: Dynamo runs the
    # optimizer's state init while it traces the first step, so the variant
    # saved guards the filled state (`len(L['self'].state) == 12`), which a
    # fresh process's first step has not made yet.
    "train_step": "miss_bypassed",
}


@pytest.fixture(scope="session")
def modes_round_trip(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    work = tmp_path_factory.mktemp("modes")
    store = work / "store"
    sides = []
    for mode in ("compile", "load"):
        log = work / mode / "compiler.log"  # where run_scenario's spy writes
        side = run_scenario(
            f"{DEVICE}:{','.join(CASES)}",
            mode,
            store,
            work,
            extra_env={"PRECOMPILE_TEST_COMPILER_LOG": str(log)},
            program=PROGRAM,
            timeout=1500,
        )
        side["compiler_log"] = log.read_text().splitlines() if log.exists() else []
        sides.append(side)
    return sides[0], sides[1]


def _case_counter(side: dict, name: str, group: str, key: str) -> int:
    return int(side["cases"][name]["counters"].get(group, {}).get(key, 0))


def _compiler_runs(side: dict, name: str) -> list[str]:
    lo, hi = side["cases"][name]["compiler_log_lines"]
    return [line for line in side["compiler_log"][lo:hi] if line.split()[1:] not in (["-v"], ["--version"])]


def _case(name: str) -> object:
    """A case, a strict xfail with its cause where it does not warm-start whole."""
    reason = _UNSERVED.get(name)
    return name if reason is None else pytest.param(name, marks=pytest.mark.xfail(reason=reason, strict=True))


@pytest.mark.parametrize("name", [_case(n) for n in mode_cases.CASES])
def test_case_warm_starts_whole(name: str, modes_round_trip: tuple[dict, dict]) -> None:
    if name not in CASES:
        pytest.skip(f"{name} does not run on {DEVICE}")
    cold, warm = modes_round_trip
    lo, hi = cold["cases"][name]["outputs"]
    assert warm["cases"][name]["outputs"] == [lo, hi]
    # Bit for bit: on CUDA the fresh process launches the cold one's autotuning
    # and coordinate-descent winners, never configs it picked itself.
    for x, y in zip(cold["outputs"][lo:hi], warm["outputs"][lo:hi]):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    counters = warm["cases"][name]["counters"]
    assert _case_counter(warm, name, "inductor", "fxgraph_cache_miss") == 0, counters
    assert _case_counter(warm, name, "aot_autograd", "autograd_cache_miss") == 0, counters
    assert _case_counter(warm, name, "precompile", "frames_recompiled") == 0, counters
    assert _case_counter(warm, name, "stats", "unique_graphs") == 0, counters
    misses = {k: v for k, v in counters.get("precompile", {}).items() if k.startswith("miss_")}
    assert misses == {}, counters
    assert _compiler_runs(warm, name) == []
    assert warm["cases"][name]["benchmarks"] == 0
    # No launch config tuned again: each graph launches the coordinate-descent
    # winners it was saved with, also where two cases share a kernel's source.
    assert _case_counter(warm, name, "inductor", "coordesc_tuning_bench") == 0, counters


def test_autotuning_results_travel(modes_round_trip: tuple[dict, dict]) -> None:
    """The cold process benchmarked GEMM choices; the fresh one benchmarks none.

    (On CPU the two max-autotune modes compile the same graph: the cold process
    benchmarks for the first and serves the second from its own FX-graph cache.)"""
    cold, warm = modes_round_trip
    assert sum(cold["cases"][n]["benchmarks"] for n in AUTOTUNED) >= 1, [cold["cases"][n] for n in AUTOTUNED]
    for name in AUTOTUNED:
        assert warm["cases"][name]["benchmarks"] == 0, warm["cases"][name]


def test_the_fresh_process_missed_only_what_is_known(modes_round_trip: tuple[dict, dict]) -> None:
    cold, warm = modes_round_trip
    assert cold["report"]["missing_backends"] == 0, cold["report"]
    assert cold["compiler_runs"], "the cold side should have run the compiler"
    assert counter(warm, "dynamo_cache", "dynamo_cache_hit") >= 1, warm["counters"]
    assert counter(warm, "dynamo_cache", "dynamo_cache_error") == 0, warm["stderr"][-3000:]
    misses = {k: v for k, v in warm["counters"].get("precompile", {}).items() if k.startswith("miss_")}
    unserved = [_UNSERVED[n] for n in CASES if n in _UNSERVED]
    assert misses == {m: unserved.count(m) for m in unserved}, warm["stderr"][-3000:]
