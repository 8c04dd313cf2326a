"""A frame torch's package cannot name compiles, unstored, and says so.

A dataclass's generated `__init__` entered after a graph break is compiled by
Dynamo as a frame of its own; torch's package raises PackageError for it and
the call fails. With the store installed the call succeeds in every process,
the frames that can be stored load on a warm start, and the one that cannot is
an `unstorable` miss that `precompile explain` names.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from precompile import cli

pytestmark = pytest.mark.torch

PROGRAM = Path(__file__).parent / "programs" / "dataclass_frame.py"


def _run(mode: str, store: Path, work: Path) -> dict:
    out = work / f"{mode}.json"
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(work / f"inductor-{mode}"))
    proc = subprocess.run(
        [sys.executable, str(PROGRAM), mode, str(store), str(out)], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    result["stderr"] = proc.stderr
    return result


def test_an_unnamed_frame_compiles_unstored_and_is_explained(tmp_path: Path, capsys) -> None:
    store = tmp_path / "store"
    cold = _run("compile", store, tmp_path)
    assert cold["result"] == pytest.approx(cold["expected"], rel=1e-5)
    assert cold["entries"] == 1
    assert cold["counters"]["precompile"]["miss_unstorable"] == 1
    assert "precompile miss (unstorable) for __init__" in cold["stderr"]

    # A fresh host: new Inductor dir, only the store carried.
    warm = _run("load", store, tmp_path)
    assert warm["result"] == cold["result"]
    pc = warm["counters"]["precompile"]
    assert pc["frames_loaded"] >= 1
    assert pc["miss_unstorable"] == 1
    # The stored frame loads whole: no other miss, and its graph is not rebuilt.
    assert [k for k in pc if k.startswith("miss_")] == ["miss_unstorable"]
    assert warm["counters"].get("inductor", {}).get("fxgraph_cache_miss", 0) == 0

    capsys.readouterr()
    assert cli.main(["--store", str(store), "explain"]) == 0
    text = capsys.readouterr().out
    assert "unstorable" in text
    assert "<string>" in text
