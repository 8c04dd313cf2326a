"""A served warm start imports the parts it runs, not the compiler; a frame
that must compile in the same process compiles as in torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.processes import PROGRAMS, child_env

pytestmark = pytest.mark.torch

PROGRAM = PROGRAMS / "lean_start.py"

# Compiler modules a process that only runs stored graphs has no use for,
# and why each is the compiler's.
COMPILER_MODULES = {
    "torch._inductor.compile_fx": "the compiler's entry point; the backend's config was taken through it",
    "torch._inductor.lowering": "every aten lowering, registered at import",
    "torch._inductor.select_algorithm": "autotuning between kernel choices; stored code imports its extern_kernels",
    "torch._inductor.autotune_process": "benchmarks kernel choices in subprocesses",
    "torch._inductor.scheduler": "fuses kernels",
    "torch._inductor.decomposition": "builds the decomposition table lowering uses; a stored graph's options name it",
    "torch._inductor.graph": "GraphLowering; a cache hit reads one of its class attributes",
    "torch._inductor.debug": "the compile's debug tracing; a graph's call reads two of its flags",
    "torch._inductor.codegen.wrapper": "writes the Python wrapper; stored code imports an alignment helper next to it",
    "torch._inductor.codegen.cpp": "the C++ code generator",
    "torch._inductor.codegen.triton": "the Triton code generator",
    "torch._inductor.codegen.simd": "the SIMD kernel generator both build on",
    "torch._dynamo.repro.after_dynamo": "Dynamo's minifier, which torch.compile wraps every backend for",
    "torch._dynamo.debug_utils": "the minifier's helpers",
}
# Client libraries torch's Inductor imports at import time but runs only
# for a configured remote cache (the store defers them to their first use).
OPTIONAL_CLIENTS = {"redis": "torch._inductor.remote_cache imports it; only RedisRemoteCacheBackend uses it"}
# Runtime parts a CPU graph never runs (the program serves a CPU model).
CPU_UNUSED = {"torch._inductor.runtime.triton_heuristics": "Triton kernels' launcher and autotuner"}
# Still imported, by torch itself rather than the store's path:
# `torch.testing` by `import torch` (autograd's gradcheck) on newer torches;
# `tabulate` only at exit (Dynamo's compile-time summary).


def _run(phase: str, store: Path, work: Path, **env: str) -> dict[str, Any]:
    out = work / f"{phase}.json"
    proc = subprocess.run(
        [sys.executable, str(PROGRAM), phase, str(store), str(out)],
        capture_output=True,
        text=True,
        env=child_env({"TORCHINDUCTOR_CACHE_DIR": str(work / f"inductor-{phase}"), **env}),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(out.read_text())
    return result


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A store the compile side filled, then a fresh process served from it."""
    work = tmp_path_factory.mktemp("lean")
    compiled = _run("compile", work / "store", work)
    assert compiled["max_error"] < 1e-5
    result = _run("serve", work / "store", work)
    result["compile_warnings"] = compiled["warnings"]
    return result


def test_a_served_warm_start_imports_no_compiler(served: dict[str, Any]) -> None:
    assert served["served"].get("frames_loaded", 0) >= 1, served["served"]
    assert served["max_error"] < 1e-5
    imported = set(served["modules"])
    print(f"modules imported by the first output: {len(imported)}")
    unused = {**COMPILER_MODULES, **OPTIONAL_CLIENTS, **CPU_UNUSED}
    loaded = {name: why for name, why in unused.items() if name in imported}
    assert not loaded, loaded
    # Uninstalled, the served graph still runs, and still imports no compiler.
    assert served["after_uninstall_error"] == 0
    assert not set(COMPILER_MODULES) & set(served["modules_after_uninstall"])


def test_triton_runtime_patches_wait_for_its_import(served: dict[str, Any]) -> None:
    # Not imported at install (above); patched once imported; put back at uninstall.
    ours = {
        "autotune_to_one_config": "autotune_reuse.py",
        "maybe_clone_args": "lean_imports.py",
        "coordinate_descent_tuning": "coordesc.py",
        "_precompile_config": "coordesc.py",
        "recheck_autotune_cache": "coordesc.py",
    }
    assert served["triton_runtime_patched_by"] == ours
    assert served["triton_runtime_after_uninstall"] == dict.fromkeys(ours, "triton_heuristics.py")


def test_a_new_frame_compiles_in_the_served_process(served: dict[str, Any]) -> None:
    # The store did not hold it: it compiles, through the compiler it imports now.
    assert served["after_compile"].get("miss_not_stored", 0) >= 1, served["after_compile"]
    assert served["graphs_compiled"] >= 1
    assert served["new_frame_error"] < 1e-4
    assert "torch._inductor.compile_fx" in served["modules_after_compile"]
    # Serving and then compiling warn what the compile side did (the
    # compiler's import-time warnings come with its import, later here).
    assert set(served["warnings"]) == set(served["compile_warnings"])


def test_stand_ins_are_what_torch_gives(tmp_path: Path) -> None:
    out = _run("contract", tmp_path / "store", tmp_path)
    assert out["graph_imported_before"] is False
    assert out["cache_hit_got_stand_in"] is True
    assert out["compile_fx_got_real"] is True
    # Reading the flags did not import the debug module; importing it replaced the stand-in.
    assert out["debug_imported_by_flags"] is False
    assert out["debug_is_real"] is True
    assert all(out["config_equal"].values()), out["config_equal"]
    assert all(out["extern_kernels_equal"].values()), out["extern_kernels_equal"]
    assert all(out["debug_flags_equal"].values()), out["debug_flags_equal"]
    assert "torch._inductor.compile_fx.clone_preserve_strides" in out["helpers_equal"], out["helpers_equal"]
    assert all(out["helpers_equal"].values()), out["helpers_equal"]


def test_torch_redis_cache_works_with_its_client_deferred(tmp_path: Path, redis_server: Any) -> None:
    out = _run("contract", tmp_path / "store", tmp_path, TORCHINDUCTOR_REDIS_URL=redis_server.url)
    # install() left the Redis client unimported; torch's own Redis cache
    # still works against a real server, on the one `redis` module.
    assert out["redis_imported_at_install"] is False
    assert out["redis_round_trip"] is True
    assert out["redis_same_module"] is True


@pytest.mark.parametrize("off", ["", "deferred_clients"])
def test_deferred_clients_is_turned_off_by_name(tmp_path: Path, off: str) -> None:
    pytest.importorskip("redis")
    script = (
        "import sys, torch, precompile\n"
        f"precompile.install({str(tmp_path / 'store')!r}, save_on_exit=False)\n"
        "import torch._inductor.remote_cache as rc\n"
        "print('redis' in sys.modules, type(rc.redis).__name__)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=child_env({"PRECOMPILE_PATCHES_OFF": off}),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    # Off, torch imports its client at import, as without the store.
    assert proc.stdout.split() == (["True", "module"] if off else ["False", "DeferredModule"])
