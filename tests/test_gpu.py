"""The two-process warm start on CUDA: Triton kernels come from the store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.counters import counter
from support.warm_start import run_scenario

import precompile

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

# What Triton writes when it compiles a kernel, but never needs to launch one.
_IR_SUFFIXES = (".ttir", ".ttgir", ".llir", ".ptx", ".source")


def _triton_files(side: Path) -> list[str]:
    # Inductor keeps Triton's cache under its own cache dir unless
    # TRITON_CACHE_DIR says otherwise: look at both.
    files = []
    for root, _, names in os.walk(side):
        if "triton" in Path(root).parts:
            files += names
    return files


def _stored_graphs(store: Path, entries: dict) -> list[dict]:
    s = precompile.Store(str(store))
    graphs = []
    for entry in entries.values():
        _, meta = s.get_manifest(entry)
        for record in meta["backends"].values():
            _, backend = s.get_manifest(record["manifest"])
            for side in ("forward", "backward"):
                if backend[side] is not None:
                    graphs.append(s.get_manifest(backend[side])[1])
    return graphs


def _stored_triton_files(store: Path, entries: dict) -> list[str]:
    return [f[0] for graph in _stored_graphs(store, entries) for kernel in graph["triton"] for f in kernel["files"]]


def test_cuda_second_process_loads_triton_kernels_from_the_store(tmp_path: Path) -> None:
    store = tmp_path / "store"
    a = run_scenario("cuda_transformer", "compile", store, tmp_path)
    stored = _stored_triton_files(store, a["report"]["entries"])
    assert any(n.endswith(".cubin") for n in stored), stored
    b = run_scenario("cuda_transformer", "load", store, tmp_path)
    torch.testing.assert_close(a["outputs"][0], b["outputs"][0], rtol=0, atol=0)
    assert counter(b, "dynamo_cache", "dynamo_cache_hit") >= 1
    assert counter(b, "inductor", "fxgraph_cache_miss") == 0
    assert counter(b, "inductor", "triton_bundler_read_and_emit_kernel") > 0, b["counters"]
    emitted = _triton_files(tmp_path / "load")
    # Only what launching reads was written; a Triton compile would have
    # left its IR behind.
    assert any(f.endswith(".cubin") for f in emitted), emitted
    assert not any(f.endswith(_IR_SUFFIXES) for f in emitted), emitted
    # No C compiler ran, Triton's own stubs included (its build honours CC,
    # which the spy wraps): they came from the store, into the empty cache.
    assert b["compiler_runs"] == []
    assert counter(b, "precompile", "triton_stubs_placed") >= 1, b["counters"]
    stubs = [f for f in _triton_files(tmp_path / "load") if f.endswith(".so")]
    assert stubs, "the driver stub should be in the fresh Triton cache"
    # Every kernel loaded in this process: no compile worker pool started.
    assert b["child_processes"] == 0
    # The compiling process memoized the install hashes for this host.
    assert counter(b, "precompile", "triton_key_memo_hit") == 1, b["counters"]
    assert counter(b, "precompile", "torch_key_memo_hit") == 1, b["counters"]


_BENCHMARKS = "benchmarking.InductorBenchmarker.benchmark_gpu"


def test_cuda_autotuning_results_travel_and_a_fresh_host_benchmarks_nothing(tmp_path: Path) -> None:
    store = tmp_path / "store"
    a = run_scenario("cuda_reductions", "compile", store, tmp_path)
    # The compiling host chose among candidate configs by benchmarking them.
    assert counter(a, "inductor", _BENCHMARKS) > 0, a["counters"]
    tuned = [t for graph in _stored_graphs(store, a["report"]["entries"]) for t in graph.get("autotune", [])]
    assert tuned, "the graph should carry its kernels' autotuning results"
    b = run_scenario("cuda_reductions", "load", store, tmp_path)
    # Same configs, so bit-identical outputs, and nothing benchmarked.
    for x, y in zip(a["outputs"], b["outputs"], strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    assert counter(b, "inductor", _BENCHMARKS) == 0, b["counters"]
    assert counter(b, "inductor", "fxgraph_cache_miss") == 0, b["counters"]
    assert b["compiler_runs"] == []
    placed = [p for p in (tmp_path / "load").rglob("*.best_config")]
    assert len(placed) >= len(tuned), placed


def test_cuda_coordinate_descent_winners_load_without_tuning_or_compiling(tmp_path: Path) -> None:
    store = tmp_path / "store"
    a = run_scenario("cuda_coordesc", "compile", store, tmp_path)
    assert counter(a, "inductor", "coordesc_tuning_bench") > 0, a["counters"]
    assert counter(a, "precompile", "coordesc_winners_unstorable") == 0, a["counters"]
    b = run_scenario("cuda_coordesc", "load", store, tmp_path)
    # The winners the compiling host launched, so bit-identical outputs.
    for x, y in zip(a["outputs"], b["outputs"], strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    assert counter(b, "inductor", "coordesc_tuning_bench") == 0, b["counters"]
    assert counter(b, "precompile", "coordesc_winners_loaded") >= 1, b["counters"]
    assert counter(b, "inductor", "fxgraph_cache_miss") == 0, b["counters"]
    # Nothing compiled: every binary in the fresh host's Triton cache came from the store.
    s = precompile.Store(str(store))
    stubs = {d for entry in a["report"]["entries"].values() for d, _, _ in s.get_manifest(entry)[1]["triton_stubs"]}
    kernels = {kernel["hash"] for graph in _stored_graphs(store, a["report"]["entries"]) for kernel in graph["triton"]}
    stored = stubs | kernels
    present = set(os.listdir(tmp_path / "load" / "triton"))
    assert present and present <= stored, sorted(present - stored)
    assert b["compiler_runs"] == []


def test_cuda_identical_kernels_are_stored_once(tmp_path: Path) -> None:
    a = run_scenario("cuda_shared", "compile", tmp_path / "store", tmp_path)
    assert a["report"]["backends"] == 2
    assert a["report"]["unique_backends"] == 1
    s = precompile.Store(str(tmp_path / "store"))
    graphs = set()
    for entry in a["report"]["entries"].values():
        _, meta = s.get_manifest(entry)
        for record in meta["backends"].values():
            _, backend = s.get_manifest(record["manifest"])
            graphs.add(backend["forward"])
    (graph,) = graphs
    _, gmeta = s.get_manifest(graph)
    assert gmeta["triton"], "the graph should carry Triton kernels"


def test_cuda_graph_break_heavy_model_loads_every_graph(tmp_path: Path) -> None:
    # 24 identical blocks, a graph break after each: 24 frames whose graphs
    # all hit AOTAutogradCache inside the compiling process.
    env = {"PRECOMPILE_TEST_BLOCKS": "24"}
    store = tmp_path / "store"
    a = run_scenario("cuda_breaks", "compile", store, tmp_path, env)
    env["PRECOMPILE_TEST_STANCE"] = "fail_on_recompile"
    assert a["report"]["missing_backends"] == 0, a["report"]
    assert a["report"]["backends"] == 24
    # The first graph's Triton autotuners record their autotuning result;
    # the 23 served from the FX-graph cache record a cache read. Otherwise
    # equal, the 23 share one backend manifest.
    assert a["report"]["unique_backends"] <= 2
    b = run_scenario("cuda_breaks", "load", store, tmp_path, env)
    torch.testing.assert_close(a["outputs"][0], b["outputs"][0], rtol=0, atol=0)
    assert counter(b, "dynamo_cache", "dynamo_cache_hit") == 1
    assert counter(b, "inductor", "fxgraph_cache_miss") == 0, b["counters"]
    assert counter(b, "aot_autograd", "autograd_cache_miss") == 0, b["counters"]
    assert counter(b, "precompile", "install_failed") == 0
    assert b["frames"] == a["frames"]
    assert b["compiler_runs"] == []


def test_cuda_entry_whose_last_frame_is_cpu_only_ships_gpu_parts(tmp_path: Path) -> None:
    # A graph break whose resume frame computes on the CPU only: the entry
    # is still a GPU entry (Triton stubs and key memos travel with it).
    store = tmp_path / "store"
    a = run_scenario("cuda_then_cpu", "compile", store, tmp_path)
    s = precompile.Store(str(store))
    (entry,) = a["report"]["entries"].values()
    _, meta = s.get_manifest(entry)
    assert meta["device_type"] == "cuda", meta["device_type"]
    assert meta["triton_stubs"], "a GPU entry carries Triton's stubs"
    b = run_scenario("cuda_then_cpu", "load", store, tmp_path)
    torch.testing.assert_close(a["outputs"][0], b["outputs"][0], rtol=0, atol=0)
    assert counter(b, "inductor", "fxgraph_cache_miss") == 0, b["counters"]
    torch.testing.assert_close(a["outputs"][1], b["outputs"][1], rtol=0, atol=0)
    # The CPU frame's kernel and every CPU probe torch built for it (on a
    # host with AVX-512 BF16, VNNI or AMX, a probe each) travel too.
    assert b["compiler_runs"] == [], b["compiler_runs"]
