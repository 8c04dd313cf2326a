"""Compile in one process, load in another that has only the store.

The loading process gets a fresh Inductor cache dir, an empty Triton cache
dir and a compiler spy on PATH: it must produce the same outputs without an
FX-graph or AOTAutograd cache miss and without running the compiler.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.counters import counter
from support.warm_start import assert_compiled_nothing, assert_same_outputs, run_scenario

import precompile

pytestmark = pytest.mark.torch


def _assert_compiled_nothing(b: dict) -> None:
    assert_compiled_nothing(b)
    # Nor a child process to load a CPU probe: every shipped probe that
    # loaded on the compiling host comes with its marker.
    assert b["python_children"] == [], b["python_children"]


def _round_trip(name: str, tmp_path: Path) -> tuple[dict, dict, Path]:
    store = tmp_path / "store"
    a = run_scenario(name, "compile", store, tmp_path)
    assert counter(a, "dynamo_cache", "dynamo_cache_miss") >= 1
    assert a["compiler_runs"], "the compiling side should have run the compiler"
    assert a["python_children"], "the compiling side should have loaded its CPU probes in a child"
    b = run_scenario(name, "load", store, tmp_path)
    return a, b, store


@pytest.mark.parametrize("name", ["inference", "training", "graph_break", "dynamic"])
def test_second_process_compiles_nothing(name: str, tmp_path: Path) -> None:
    a, b, _ = _round_trip(name, tmp_path)
    assert a["report"]["missing_backends"] == 0
    assert_same_outputs(a["outputs"], b["outputs"])
    _assert_compiled_nothing(b)
    # A CPU load hashes no installation: neither torch nor the store computes torch_key.
    assert b["torch_key_computed"] is False
    assert not any(k.startswith("torch_key_memo") for k in b["counters"].get("precompile", {})), b["counters"]


def test_graph_break_and_recompiles_are_separate_backends(tmp_path: Path) -> None:
    a = run_scenario("graph_break", "compile", tmp_path / "s1", tmp_path / "gb")
    assert a["report"]["backends"] >= 2
    d = run_scenario("dynamic", "compile", tmp_path / "s2", tmp_path / "dyn")
    assert d["report"]["backends"] >= 2


def test_identical_backends_are_stored_once(tmp_path: Path) -> None:
    a, b, store = _round_trip("shared", tmp_path)
    report = a["report"]
    assert len(report["entries"]) == 2
    assert report["backends"] == 2
    assert report["unique_backends"] == 1
    assert_same_outputs(a["outputs"], b["outputs"])
    _assert_compiled_nothing(b)
    # The two entries' manifests both list the one backend manifest.
    s = precompile.Store(str(store))
    backend_sets = []
    for digest in report["entries"].values():
        _, meta = s.get_manifest(digest)
        backend_sets.append({record["manifest"] for record in meta["backends"].values()})
    assert backend_sets[0] == backend_sets[1]


def test_corrupt_blob_falls_back_to_compiling(tmp_path: Path) -> None:
    store = tmp_path / "store"
    a = run_scenario("inference", "compile", store, tmp_path)
    s = precompile.Store(str(store))
    (entry,) = a["report"]["entries"].values()
    _, meta = s.get_manifest(entry)
    (backend,) = {record["manifest"] for record in meta["backends"].values()}
    _, bmeta = s.get_manifest(backend)
    _, gmeta = s.get_manifest(bmeta["forward"])
    victim = Path(s.object_path(gmeta["fields"]["source_code"]))
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    victim.chmod(0o644)
    victim.write_bytes(bytes(data))

    b = run_scenario("inference", "load", store, tmp_path)
    assert_same_outputs(a["outputs"], b["outputs"])
    assert counter(b, "dynamo_cache", "dynamo_cache_error") == 1
    assert counter(b, "dynamo_cache", "dynamo_cache_hit") == 0
    assert "could not be loaded" in b["stderr"]
    assert "PrecompileWarning" in b["stderr"]
    assert b["compiler_runs"], "the fallback compiles for real"


def test_missing_backend_is_reported_and_the_code_still_loads(tmp_path: Path) -> None:
    # With `pending_backwards` off, a training graph whose backward never ran
    # is never recorded: the save stores its code without it.
    store = tmp_path / "store"
    off = {"PRECOMPILE_PATCHES_OFF": "pending_backwards"}
    a = run_scenario("forward_only", "compile", store, tmp_path, extra_env=off)
    assert a["report"]["missing_backends"] == 1
    assert counter(a, "precompile", "missing_backend") == 1
    assert "never recorded" in a["stderr"] and "PrecompileWarning" in a["stderr"]
    b = run_scenario("forward_only", "load", store, tmp_path)
    assert_same_outputs(a["outputs"], b["outputs"])
    assert counter(b, "dynamo_cache", "dynamo_cache_hit") == 1


def test_mega_cache_artifacts_populate_a_store(tmp_path: Path) -> None:
    mega = tmp_path / "artifacts.bin"
    a = run_scenario(
        "inference",
        "compile",
        tmp_path / "store-a",
        tmp_path / "a",
        extra_env={"PRECOMPILE_TEST_MEGA_OUT": str(mega)},
    )
    assert mega.stat().st_size > 0
    # The receiving process has an empty store and empty caches: only the
    # Mega-Cache blob travels.
    b = run_scenario(
        "inference",
        "load",
        tmp_path / "store-b",
        tmp_path / "b",
        extra_env={"PRECOMPILE_TEST_MEGA_IN": str(mega)},
    )
    assert_same_outputs(a["outputs"], b["outputs"])
    assert counter(b, "dynamo_cache", "dynamo_cache_hit") == 1
    assert precompile.Store(str(tmp_path / "store-b")).refs("dynamo/")


def test_entries_are_saved_at_exit(tmp_path: Path) -> None:
    store = tmp_path / "store"
    a = run_scenario("graph_break", "compile-at-exit", store, tmp_path)
    assert a["report"] is None  # nothing saved explicitly
    assert precompile.Store(str(store)).refs("dynamo/")
    b = run_scenario("graph_break", "load", store, tmp_path)
    assert_same_outputs(a["outputs"], b["outputs"])
    _assert_compiled_nothing(b)


@pytest.mark.slow
def test_graph_break_heavy_model_stores_one_backend_and_loads_every_graph(tmp_path: Path) -> None:
    # 16 identical blocks with a graph break after each: 16 frames and 16
    # equal graphs, the later ones served by AOTAutogradCache while compiling.
    env = {"PRECOMPILE_TEST_BLOCKS": "16"}
    store = tmp_path / "store"
    a = run_scenario("breaks", "compile", store, tmp_path, env)
    assert a["report"]["missing_backends"] == 0, a["report"]
    assert a["report"]["backends"] == 16
    assert a["report"]["unique_backends"] == 1
    s = precompile.Store(str(store))
    (entry,) = a["report"]["entries"].values()
    _, meta = s.get_manifest(entry)
    assert len({use["manifest"] for use in meta["backends"].values()}) == 1
    env["PRECOMPILE_TEST_STANCE"] = "fail_on_recompile"
    b = run_scenario("breaks", "load", store, tmp_path, env)
    assert_same_outputs(a["outputs"], b["outputs"])
    _assert_compiled_nothing(b)
    assert counter(b, "precompile", "install_failed") == 0
    # Every frame the compiling process produced is served, none compiled.
    assert b["frames"] == a["frames"]
