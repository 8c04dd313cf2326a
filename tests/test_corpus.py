"""Real models warm-start whole: every frame and recompile of the cold process loads.

The corpus (benches/corpus.py: torchvision conv nets, GPT-2, BERT, T5, a
training step) is compiled once in one cold process, then run again in one
fresh process that has only the store: new Inductor and Triton cache dirs,
a compiler spy on PATH. Per model, the outputs must be identical and the
fresh process must trace and compile nothing: no FX-graph or AOTAutograd
cache miss, no frame Dynamo compiled although the store held it, no miss.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from warm_start import run_scenario

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benches"))
import corpus

pytestmark = [pytest.mark.torch, pytest.mark.slow]

PROGRAM = Path(__file__).parent / "programs" / "corpus_run.py"


@pytest.fixture(scope="session")
def corpus_round_trip(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    names = corpus.available()
    if not names:
        pytest.skip("; ".join(corpus.missing_reason(n) or "" for n in corpus.MODELS))
    work = tmp_path_factory.mktemp("corpus")
    store = work / "store"
    cold = run_scenario(",".join(names), "compile", store, work, program=PROGRAM)
    warm = run_scenario(",".join(names), "load", store, work, program=PROGRAM)
    return cold, warm


def _model_counter(result: dict, name: str, group: str, key: str) -> int:
    return int(result["models"][name]["counters"].get(group, {}).get(key, 0))


@pytest.mark.parametrize("name", list(corpus.MODELS))
def test_model_warm_starts_whole(
    name: str, corpus_round_trip: tuple[dict, dict]
) -> None:
    reason = corpus.missing_reason(name)
    if reason is not None:
        pytest.skip(reason)
    cold, warm = corpus_round_trip
    lo, hi = cold["models"][name]["outputs"]
    assert warm["models"][name]["outputs"] == [lo, hi]
    for x, y in zip(cold["outputs"][lo:hi], warm["outputs"][lo:hi]):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    counters = warm["models"][name]["counters"]
    assert _model_counter(warm, name, "dynamo_cache", "dynamo_cache_hit") >= 1, counters
    assert _model_counter(warm, name, "inductor", "fxgraph_cache_miss") == 0, counters
    assert _model_counter(warm, name, "aot_autograd", "autograd_cache_miss") == 0, (
        counters
    )
    assert _model_counter(warm, name, "precompile", "frames_recompiled") == 0, counters
    assert _model_counter(warm, name, "precompile", "frames_loaded") >= 1, counters
    misses = {
        k: v for k, v in counters.get("precompile", {}).items() if k.startswith("miss_")
    }
    assert misses == {}, counters
    # Every compiled variant of the cold process came back.
    assert _model_counter(warm, name, "precompile", "frames_loaded") >= _model_counter(
        cold, name, "stats", "unique_graphs"
    ), (cold["models"][name]["counters"], counters)


def test_the_fresh_process_runs_no_compiler(
    corpus_round_trip: tuple[dict, dict],
) -> None:
    cold, warm = corpus_round_trip
    assert cold["compiler_runs"], "the cold side should have run the compiler"
    assert warm["compiler_runs"] == [], warm["compiler_runs"]
    assert "PrecompileWarning" not in warm["stderr"], warm["stderr"][-3000:]
