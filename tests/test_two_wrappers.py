"""Two torch.compile wrappers of one function: both are saved, and each loads its own graphs.

torch files a function's packages under one key and keeps the last recorded,
so of `torch.compile(f)` and `torch.compile(f, dynamic=True)` only one would
be saved, and in a later process its graphs would serve both wrappers. Each
wrapper's lineage is saved under its own key (the plain wrapper under
torch's), and a fresh process loads both and compiles nothing; the static
wrapper, called at a size it never saw, compiles as its own static graph
requires instead of being served the dynamic wrapper's graph.

Two wrappers with an equal backend (two instances of one model class, each
compiled; blocks of two classes each compiled by `Module.compile()`, whose
wrappers are all of `Module._call_impl`) share one key, and one entry: Dynamo serves either wrapper's calls
from the variants both compiled, and the saved entry holds them all, where
torch's would hold the last wrapper's alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.counters import counter
from support.warm_start import assert_same_outputs, run_scenario

pytestmark = pytest.mark.torch

PROGRAM = Path(__file__).resolve().parent / "programs" / "two_wrappers.py"


@pytest.mark.parametrize("name", ["function", "modules"])
def test_static_and_dynamic_wrappers_each_load_their_own(name: str, tmp_path: Path) -> None:
    store = tmp_path / "store"
    a = run_scenario(name, "compile", store, tmp_path, program=PROGRAM)
    assert a["graphs"] == 2, a["counters"]
    plain, tagged = a["report"]
    assert tagged.startswith(plain + "-"), a["report"]  # one function, two lineages
    b = run_scenario(name, "load", store, tmp_path, program=PROGRAM)
    assert counter(b, "dynamo_cache", "dynamo_cache_hit") == 2, b["counters"]
    assert b["graphs"] == 0, b["counters"]
    assert_same_outputs(a["outputs"], b["outputs"][:4])
    # The dynamic wrapper's own graph serves a size it never saw; the static
    # wrapper's static graph cannot, so it compiles.
    assert b["graphs_after_new_size"] == 1, b["counters"]


@pytest.mark.parametrize(
    ("name", "patch", "graphs"), [("instances", "on", 2), ("regional", "on", 3), ("regional", "off", 3)]
)
def test_wrappers_of_one_lineage_save_every_variant(name: str, patch: str, graphs: int, tmp_path: Path) -> None:
    store = tmp_path / "store"
    env = {"PRECOMPILE_PATCHES_OFF": "shared_lineage_entries"} if patch == "off" else None
    a = run_scenario(name, "compile", store, tmp_path, extra_env=env, program=PROGRAM)
    assert a["graphs"] == graphs, a["counters"]
    assert len(a["report"]) == 1, a["report"]  # one lineage: one key
    b = run_scenario(name, "load", store, tmp_path, extra_env=env, program=PROGRAM)
    assert counter(b, "dynamo_cache", "dynamo_cache_hit") == 2, b["counters"]
    assert_same_outputs(a["outputs"], b["outputs"][:4])
    if patch == "off":
        # torch's recording: the second wrapper's package replaced the
        # first's, whose graph the fresh process compiles again.
        assert b["graphs"] == 1, b["counters"]
    else:
        assert b["graphs"] == 0, b["counters"]
