"""Real models warm-start whole: every frame and recompile of the cold process loads.

The corpus (benches/corpus.py: torchvision conv nets, GPT-2, Llama, Mistral, BERT, T5, a
training step; PRECOMPILE_CORPUS=extended or all runs 48 more) is compiled once in one
cold process, then run again in one fresh process that has only the store: new
Inductor and Triton cache dirs, a compiler spy on PATH. Per model, the outputs must be identical and the
fresh process must trace and compile nothing: no FX-graph or AOTAutograd
cache miss, no frame Dynamo compiled although the store held it, no miss.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from support.warm_start import run_scenario

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benches"))
import corpus

# The first test waits for the shared cold and warm processes.
pytestmark = [pytest.mark.torch, pytest.mark.slow, pytest.mark.timeout(2400)]

PROGRAM = Path(__file__).parent / "programs" / "corpus_run.py"


@pytest.fixture(scope="session")
def corpus_round_trip(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    names = corpus.available()
    if not names:
        pytest.skip("; ".join(corpus.missing_reason(n) or "" for n in corpus.selected()))
    work = tmp_path_factory.mktemp("corpus")
    store = work / "store"
    sides = []
    for mode in ("compile", "load"):
        log = work / mode / "compiler.log"  # where run_scenario's spy writes
        env = {"PRECOMPILE_TEST_COMPILER_LOG": str(log)}
        side = run_scenario(
            ",".join(names),
            mode,
            store,
            work,
            extra_env=env,
            program=PROGRAM,
            timeout=1800,
        )
        side["compiler_log"] = log.read_text().splitlines() if log.exists() else []
        sides.append(side)
    return sides[0], sides[1]


def _compiler_runs(result: dict, name: str) -> list[str]:
    """The compiler calls made while model `name` ran, version queries aside."""
    lo, hi = result["models"][name]["compiler_log_lines"]
    return [line for line in result["compiler_log"][lo:hi] if line.split()[1:] not in (["-v"], ["--version"])]


def _model_counter(result: dict, name: str, group: str, key: str) -> int:
    return int(result["models"][name]["counters"].get(group, {}).get(key, 0))


# Models whose frames torch saves without compiled code (a guard neither
# torch nor the store can carry across processes): none in the corpus.
# T5's guard on type(self.config) is carried (see
# precompile._torch.named_class_guards); the detection model's op-free graph
# is compiled (precompile._torch.op_free_graphs).
_TORCH_BYPASSES: dict[str, str] = {}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(reason=_TORCH_BYPASSES[n], strict=True)) if n in _TORCH_BYPASSES else n
        for n in corpus.selected()
    ],
)
def test_model_warm_starts_whole(name: str, corpus_round_trip: tuple[dict, dict]) -> None:
    reason = corpus.missing_reason(name)
    if reason is not None:
        pytest.skip(reason)
    cold, warm = corpus_round_trip
    assert cold["models"][name]["error"] is None, cold["models"][name]["error"]
    assert warm["models"][name]["error"] is None, warm["models"][name]["error"]
    lo, hi = cold["models"][name]["outputs"]
    assert warm["models"][name]["outputs"] == [lo, hi]
    for x, y in zip(cold["outputs"][lo:hi], warm["outputs"][lo:hi]):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    counters = warm["models"][name]["counters"]
    assert _model_counter(warm, name, "dynamo_cache", "dynamo_cache_hit") >= 1, counters
    assert _model_counter(warm, name, "inductor", "fxgraph_cache_miss") == 0, counters
    assert _model_counter(warm, name, "aot_autograd", "autograd_cache_miss") == 0, counters
    assert _model_counter(warm, name, "precompile", "frames_recompiled") == 0, counters
    assert _model_counter(warm, name, "precompile", "frames_loaded") >= 1, counters
    misses = {k: v for k, v in counters.get("precompile", {}).items() if k.startswith("miss_")}
    assert misses == {}, counters
    assert _compiler_runs(warm, name) == []
    # Every compiled variant of the cold process came back.
    assert _model_counter(warm, name, "precompile", "frames_loaded") >= _model_counter(
        cold, name, "stats", "unique_graphs"
    ), (cold["models"][name]["counters"], counters)


def test_the_compiler_ran_only_where_torch_bypassed(
    corpus_round_trip: tuple[dict, dict],
) -> None:
    cold, warm = corpus_round_trip
    assert cold["compiler_runs"], "the cold side should have run the compiler"
    for name in warm["models"]:
        if name not in _TORCH_BYPASSES:
            assert _compiler_runs(warm, name) == [], name
