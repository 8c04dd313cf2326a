"""Build host to serving host through one bundle file.

One process compiles into a store; `precompile export` packs it into a
bundle; a fresh process with an empty store, a fresh Inductor cache, an
empty Triton cache and a compiler spy on PATH serves from the bundle as a
read-only layer. It must give the same outputs and compile nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import precompile
from precompile import Store, open_bundle
from warm_start import counter, run_scenario

pytestmark = pytest.mark.torch


def test_serving_process_runs_from_a_shipped_bundle(tmp_path: Path) -> None:
    build_store = tmp_path / "build-store"
    a = run_scenario("inference", "compile", build_store, tmp_path / "build")
    assert a["compiler_runs"], "the build side should have compiled"
    entries = a["report"]["entries"]
    assert entries

    bundle = tmp_path / "model.bundle"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(Path(precompile.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run(
        [sys.executable, "-m", "precompile", "--store", str(build_store), "export", str(bundle)],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    shipped = open_bundle(bundle)
    for key, digest in entries.items():
        assert digest in {shipped.get_ref(name) for name in shipped.refs()}, key
    assert shipped.verify()["ok"]

    serving_store = tmp_path / "serving-store"  # empty: everything must come from the bundle
    b = run_scenario(
        "inference", "load", serving_store, tmp_path / "serve",
        extra_env={"PRECOMPILE_TEST_LAYERS": str(bundle)},
    )
    assert len(a["outputs"]) == len(b["outputs"])
    for x, y in zip(a["outputs"], b["outputs"]):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    assert counter(b, "dynamo_cache", "dynamo_cache_hit") >= 1, b["counters"]
    assert counter(b, "dynamo_cache", "dynamo_cache_error") == 0, b["stderr"][-3000:]
    assert counter(b, "inductor", "fxgraph_cache_miss") == 0, b["counters"]
    assert counter(b, "aot_autograd", "autograd_cache_miss") == 0, b["counters"]
    assert b["compiler_runs"] == [], b["compiler_runs"]
    # The serving store wrote no entries of its own: they were all read from the bundle.
    assert Store(serving_store).refs("dynamo/") == []
