"""A graph with no tensor op (torchvision's ops start with one) compiles, stores and loads;
so does one that runs nothing at all (a shape check before a graph break).

torchvision's `batched_nms`, `box_iou` and the other ops start with
`_log_api_usage_once`, then break the graph on a data-dependent shape; the
first graph has a call but no aten op. With `caching_precompile` on, torch
bundles its AOTAutograd entry, while Inductor hands back the graph's bound
method instead of compiled code, and the user's call raised (`expected
OutputCode, got <class 'method'>`), with or without a store. Installed, the
store has Inductor compile it: the cold call returns, and a fresh process
loads every frame and compiles nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.counters import counter
from support.warm_start import assert_compiled_nothing, assert_same_outputs, run_scenario

pytestmark = pytest.mark.torch


def test_an_op_free_graph_warm_starts(tmp_path: Path) -> None:
    store = tmp_path / "store"
    cold = run_scenario("op_free_graph", "compile", store, tmp_path)
    assert_same_outputs(cold["outputs"], [torch.arange(4.0) + 1])
    assert cold["report"]["missing_backends"] == 0
    warm = run_scenario("op_free_graph", "load", store, tmp_path)
    assert_same_outputs(warm["outputs"], cold["outputs"])
    assert_compiled_nothing(warm)
    # The op-free graph's frame and the resume function after the break.
    assert counter(warm, "precompile", "frames_loaded") == 2, warm["counters"]
    assert counter(warm, "precompile", "frames_recompiled") == 0, warm["counters"]


def test_a_graph_that_runs_nothing_warm_starts(tmp_path: Path) -> None:
    """torch 2.15 gives such a graph its no-op call without the backend, so
    no backend is recorded and torch's save drops the code; stored as that
    call, the fresh process loads every frame (torch 2.11 compiles the graph
    with Inductor: the same outcome)."""
    store = tmp_path / "store"
    cold = run_scenario("unused_shape_check", "compile", store, tmp_path)
    assert_same_outputs(cold["outputs"], [torch.arange(3.0) * 2, torch.arange(5.0) * 2])
    assert cold["report"]["missing_backends"] == 0, cold["stderr"][-3000:]
    warm = run_scenario("unused_shape_check", "load", store, tmp_path)
    assert_same_outputs(warm["outputs"], cold["outputs"])
    assert_compiled_nothing(warm)
    misses = {k: v for k, v in warm["counters"].get("precompile", {}).items() if k.startswith("miss_")}
    assert misses == {}, warm["counters"]
    # The checked frame and the resume function after the break.
    assert counter(warm, "precompile", "frames_loaded") == 2, warm["counters"]
    assert counter(warm, "precompile", "frames_recompiled") == 0, warm["counters"]
