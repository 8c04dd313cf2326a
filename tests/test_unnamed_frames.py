"""Frames of generated code: stored like any frame, or explained.

A dataclass's generated `__init__` entered after a graph break is compiled by
Dynamo as a frame of its own; torch's package raises PackageError for it and
the call fails. With the store installed it is named through its class and
loads on a warm start like any frame; if the class generates other code by
then, the entry is a `source_changed` miss. A frame of code nothing names (a
function `exec` made in a namespace that is no module) compiles in every
process, an `unstorable` miss that `precompile explain` names. On Python
3.12, a graph break inside a list comprehension makes Dynamo generate a
function for the comprehension, which the cold process runs uncompiled; the
store carries it, and the warm process loads every compiled frame and compiles
nothing.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from support.counters import miss_counters
from support.processes import PROGRAMS, run_python

from precompile import cli

pytestmark = pytest.mark.torch

PROGRAM = PROGRAMS / "generated_frames.py"


def _run(mode: str, store: Path, work: Path, variant: str) -> dict:
    out = work / f"{mode}-{variant}.json"
    # A fresh host per run: a new Inductor dir, only the store carried.
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(work / f"inductor-{mode}-{variant}"))
    proc = run_python(PROGRAM, mode, store, out, variant, env=env, timeout=None, tail=3000)
    result = json.loads(out.read_text())
    result["stderr"] = proc.stderr
    return result


def _graphs_compiled(result: dict) -> int:
    counters = result["counters"]
    return counters.get("inductor", {}).get("fxgraph_cache_miss", 0) + counters.get("aot_autograd", {}).get(
        "autograd_cache_miss", 0
    )


@pytest.fixture(scope="module")
def dataclass_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    work = tmp_path_factory.mktemp("generated_frames")
    store = work / "store"
    cold = _run("compile", store, work, "dataclass")
    return store, cold


def test_a_dataclass_init_frame_is_stored_through_its_class(dataclass_store, tmp_path: Path) -> None:
    store, cold = dataclass_store
    assert cold["result"] == pytest.approx(cold["expected"], rel=1e-5)
    assert cold["entries"] == 1
    assert miss_counters(cold) == {"miss_not_stored": 1}
    assert _graphs_compiled(cold) >= 2  # the caller's graph and the `__init__` frame's

    warm = _run("load", store, tmp_path, "dataclass")
    assert warm["result"] == cold["result"]
    pc = warm["counters"]["precompile"]
    # forward, its resume function, Output.__init__ and its resume function.
    assert pc["frames_loaded"] == 4
    assert miss_counters(warm) == {}
    assert _graphs_compiled(warm) == 0
    assert "PrecompileWarning" not in warm["stderr"]


def test_a_dataclass_that_generates_other_code_misses(dataclass_store, tmp_path: Path, capsys) -> None:
    store, _ = dataclass_store
    warm = _run("load", store, tmp_path, "dataclass_extra_field")
    assert warm["result"] == pytest.approx(warm["expected"], rel=1e-5)
    assert miss_counters(warm) == {"miss_source_changed": 1}
    assert "Output.__init__ generates other code here than when it was compiled" in warm["stderr"]

    capsys.readouterr()
    assert cli.main(["--store", str(store), "explain"]) == 0
    text = capsys.readouterr().out
    assert "source_changed" in text
    assert "__main__.Output.__init__" in text


def test_a_frame_nothing_names_compiles_unstored_and_is_explained(tmp_path: Path, capsys) -> None:
    store = tmp_path / "store"
    cold = _run("compile", store, tmp_path, "exec_function")
    assert cold["result"] == pytest.approx(cold["expected"], rel=1e-5)
    assert cold["entries"] == 1
    assert cold["counters"]["precompile"]["miss_unstorable"] == 1
    assert "precompile miss (unstorable) for scaled" in cold["stderr"]

    warm = _run("load", store, tmp_path, "exec_function")
    assert warm["result"] == cold["result"]
    pc = warm["counters"]["precompile"]
    assert pc["frames_loaded"] >= 1
    misses = miss_counters(warm)
    assert misses["miss_unstorable"] == 1
    if "miss_bypassed" in misses:
        # A torch that cannot save the generated function the caller's guards
        # hold (2.11) bypassed the caller at save: that frame compiles again,
        # explained, and a drawn resume-function name that a loaded one holds
        # is drawn again rather than failing the call.
        assert set(misses) <= {"miss_unstorable", "miss_bypassed", "miss_guard_failed"}
    else:
        # The stored frame loads whole: the unnamed one is the only miss.
        assert misses == {"miss_unstorable": 1}
        assert warm["counters"].get("inductor", {}).get("fxgraph_cache_miss", 0) == 1

    capsys.readouterr()
    assert cli.main(["--store", str(store), "explain"]) == 0
    text = capsys.readouterr().out
    assert "unstorable" in text
    assert "<string>" in text


@pytest.mark.skipif(sys.version_info < (3, 12), reason="comprehensions run inline from Python 3.12 on")
@pytest.mark.parametrize("variant", ["comprehension", "comprehension_closure"])
def test_a_comprehension_that_breaks_the_graph_warm_starts_whole(variant: str, tmp_path: Path) -> None:
    store = tmp_path / "store"
    cold = _run("compile", store, tmp_path, variant)
    assert cold["result"] == pytest.approx(cold["expected"], rel=1e-5)
    assert cold["entries"] == 1
    assert miss_counters(cold) == {"miss_not_stored": 1}

    warm = _run("load", store, tmp_path, variant)
    assert warm["result"] == cold["result"]
    assert warm["counters"]["precompile"]["frames_loaded"] >= 2
    assert miss_counters(warm) == {}
    assert _graphs_compiled(warm) == 0
    assert "PrecompileWarning" not in warm["stderr"]
