"""Placing stored kernel files where torch's loaders look."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.processes import last_line, run_python

import precompile
from precompile import kernels
from precompile.results import StoredGraph
from precompile.schema import AutotuneRef, FormatError, GraphMeta, PickledRef


@pytest.mark.parametrize(
    "bad",
    ["../evil.so", "/etc/evil.so", "ab/../../evil.so", "ab/cd/evil.so", "ab/evil.py", "a/evil.so", "ab/.so", ""],
)
def test_library_paths_outside_the_cache_dir_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="refusing"):
        kernels.validate_library_path(bad)


def test_library_is_placed_once(tmp_path: Path) -> None:
    rel = "ab/cabcdef.main.so"
    assert kernels.place_library(str(tmp_path), rel, b"\x7fELF first")
    assert not kernels.place_library(str(tmp_path), rel, b"\x7fELF second")
    assert (tmp_path / rel).read_bytes() == b"\x7fELF first"
    assert not [p for p in (tmp_path / "ab").iterdir() if p.name.endswith(".tmp")]


def test_library_relpath_only_inside_cache_dir(tmp_path: Path) -> None:
    assert kernels.library_relpath(str(tmp_path / "xy" / "cxy.so"), str(tmp_path)) == "xy/cxy.so"
    assert kernels.library_relpath("/usr/lib/libc.so", str(tmp_path)) is None


@pytest.mark.parametrize(
    "bad",
    [
        "../evil.best_config",
        "/etc/evil.best_config",
        "ab/../../evil.best_config",
        "ab/cd/evil.best_config",
        "ab/evil.so",
        "ab/evil.best_config.py",
        "ab/.best_config",
        "",
    ],
)
def test_autotune_paths_outside_the_cache_dir_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="refusing"):
        kernels.validate_autotune_path(bad)


def test_autotune_result_is_placed_once_and_a_hosts_own_is_kept(tmp_path: Path) -> None:
    rel = "xk/" + "ab" * 32 + ".best_config"
    assert kernels.autotune_relpath(str(tmp_path / rel), str(tmp_path)) == rel
    assert kernels.autotune_relpath("/etc/passwd", str(tmp_path)) is None
    assert kernels.place_autotune(str(tmp_path), rel, b'{"XBLOCK": 64}')
    assert not kernels.place_autotune(str(tmp_path), rel, b'{"XBLOCK": 128}')
    assert json.loads((tmp_path / rel).read_text()) == {"XBLOCK": 64}
    assert (tmp_path / rel).stat().st_mode & 0o777 == 0o644


def _graph_meta(autotune: tuple[AutotuneRef, ...]) -> GraphMeta:
    return GraphMeta(skeleton=PickledRef("a" * 64), fields={}, autotune=autotune)


def test_a_graph_manifest_carries_autotune_results_only_when_it_has_some() -> None:
    plain = _graph_meta(()).to_json()
    # No key at all: a graph without tuning keeps its manifest and digest.
    assert "autotune" not in plain and GraphMeta.from_json(plain).autotune == ()
    tuned = _graph_meta((AutotuneRef("xk/k.best_config", "b" * 64),))
    doc = tuned.to_json()
    assert doc["autotune"] == [["xk/k.best_config", "b" * 64]]
    assert GraphMeta.from_json(doc) == tuned
    assert "b" * 64 in GraphMeta.from_json(doc).children()
    for bad in ({"autotune": "xk/k.best_config"}, {"autotune": [["xk/k.best_config"]]}):
        with pytest.raises(FormatError, match="autotune"):
            GraphMeta.from_json({**plain, **bad})


def test_a_stored_graph_with_a_hostile_autotune_path_is_refused(tmp_path: Path) -> None:
    store = precompile.Store(str(tmp_path / "store"))
    blob = store.put(b"{}")
    skeleton = PickledRef(store.put(b"not read"))
    meta = GraphMeta(skeleton=skeleton, fields={}, autotune=(AutotuneRef("../../outside.best_config", blob),))
    digest = store.put_manifest(sorted(set(meta.children())), meta.to_json())
    with pytest.raises(ValueError, match="refusing stored autotune path"):
        StoredGraph.read(store, digest, {})


def test_group_file_keeps_only_what_launching_reads() -> None:
    group = {
        "child_paths": {
            "k.cubin": "[REPLACE]/k.cubin",
            "k.json": "[REPLACE]/k.json",
            "k.ttir": "[REPLACE]/k.ttir",
            "k.ttgir": "[REPLACE]/k.ttgir",
            "k.llir": "[REPLACE]/k.llir",
            "k.ptx": "[REPLACE]/k.ptx",
        }
    }
    trimmed = json.loads(kernels.trim_group_file(json.dumps(group).encode()))
    assert sorted(trimmed["child_paths"]) == ["k.cubin", "k.json"]
    assert all(kernels.is_load_file(n) for n in trimmed["child_paths"])
    assert not kernels.is_load_file("k.ptx")


@pytest.mark.torch
def test_every_cpu_probe_torch_builds_is_recognized(tmp_path: Path) -> None:
    """The vector-ISA probe and the feature probes (AVX-512 BF16 and VNNI,
    AMX), recognized by torch's own probe programs; a kernel is never taken
    for a probe. Where torch marks a probe that loaded, only marked ones
    ship (an unmarked probe there is one that failed to load); elsewhere
    every probe ships with whether a marker says it loaded."""
    pytest.importorskip("torch")
    from torch._inductor import cpu_vec_isa

    from precompile import _torch as tc

    programs = {
        "avx": cpu_vec_isa.VecISA._avx_code,
        "bf16": cpu_vec_isa.VecAVX512._avx512_bf16_code,
        "vnni": cpu_vec_isa.VecAVX512VNNI._avx512_vnni_code,
        "amx": cpu_vec_isa.VecAMX._amx_code,
    }
    libraries = {}
    for i, (name, program) in enumerate(programs.items()):
        sub = tmp_path / f"p{i}"
        sub.mkdir()
        (sub / f"c{name}.cpp").write_text(program)
        (sub / f"c{name}.so").write_bytes(b"\x7fELF")
        libraries[name] = str(sub / f"c{name}.so")
    kernel = tmp_path / "kk"
    kernel.mkdir()
    (kernel / "ckernel.cpp").write_text('#include "cpp_prefix.h"\nextern "C" void kernel() {}\n')
    (kernel / "ckernel.so").write_bytes(b"\x7fELF")

    for name in ("bf16", "amx"):
        Path(libraries[name] + ".load_ok").touch()
    found = tc.isa_probe_libraries(str(tmp_path))
    if tc.TORCH_MARKS_PROBES:
        # Only marked probes: an unmarked one there failed to load.
        assert found == sorted([(libraries["bf16"], True), (libraries["amx"], True)])
    else:
        # Every probe, each with whether a marker says it loaded.
        assert found == sorted((path, name in ("bf16", "amx")) for name, path in libraries.items())


_PICK_ISA = """
import json, os, sys
children = []

def audit(event, args):
    # Python children only: the compiler's version queries are children too.
    if event == "subprocess.Popen" and os.fsdecode(args[0] or args[1][0]) == sys.executable:
        children.append(1)

sys.addaudithook(audit)
import precompile
precompile.install(sys.argv[1])
from torch._inductor import cpu_vec_isa
print(json.dumps([[str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()], len(children)]))
"""


def _valid_isas(tmp_path: Path) -> tuple[list[str], int]:
    """The instruction sets Inductor finds usable in a fresh process, and how
    many Python child processes it started to find them."""
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    out = run_python("-c", _PICK_ISA, tmp_path / "store", env=env, timeout=600)
    isas, children = json.loads(last_line(out.stdout))
    return isas, children


@pytest.mark.torch
def test_a_probe_is_marked_only_once_it_loaded(tmp_path: Path) -> None:
    """While installed, a probe that loaded in torch's child process is
    marked and trusted from then on, on every supported torch; a probe that
    fails to load gets no marker and its instruction set is not used."""
    first, children = _valid_isas(tmp_path)
    if not first:
        pytest.skip("no vector instruction set on this CPU")
    assert children > 0  # each probe built, and loaded in a child
    inductor = tmp_path / "inductor"
    marked = sorted(inductor.glob("*/*.so.load_ok"))
    assert marked, "the probes that loaded should be marked"
    assert _valid_isas(tmp_path) == (first, 0)  # trusted from the markers

    # The probes now fail to load, and no marker says otherwise.
    for marker in marked:
        Path(str(marker)[: -len(".load_ok")]).write_bytes(b"\x7fELF not a library")
        marker.unlink()
    isas, children = _valid_isas(tmp_path)
    assert isas == [] and children > 0
    assert sorted(inductor.glob("*/*.so.load_ok")) == []


@pytest.mark.torch
@pytest.mark.parametrize("call", ["check_call", "run"])
def test_probe_load_stand_in_marks_what_loaded_for_either_call(call: str, tmp_path: Path) -> None:
    """torch 2.11 loads a probe with `subprocess.check_call`, 2.13 with
    `subprocess.run(check=True)`. Either way the stand-in marks a library
    only after torch's own probe program loaded it in a child process,
    trusts the mark from then on, and passes any other command through."""
    from torch._inductor.cpu_vec_isa import VecISA

    from precompile import _core
    from precompile import _torch as tc

    if tc.TORCH_MARKS_PROBES:
        pytest.skip("this torch marks its probes itself; the stand-in is not installed")
    stand_in = tc._ProbeLoadCheck(subprocess, VecISA._avx_py_load)
    invoke = getattr(stand_in, call)
    library = tmp_path / "cprobe.so"
    library.write_bytes(Path(_core.__file__).read_bytes())  # a real shared library
    marker = tmp_path / "cprobe.so.load_ok"
    probe = [sys.executable, "-c", VecISA._avx_py_load.replace("__lib_path__", str(library))]

    invoke(probe)
    assert marker.exists()

    library.write_bytes(b"\x7fELF not a library")
    done = invoke(probe)  # trusted: no child process runs
    assert (done if call == "check_call" else done.returncode) == 0

    marker.unlink()
    with pytest.raises(subprocess.CalledProcessError):
        invoke(probe, stderr=subprocess.DEVNULL) if call == "check_call" else invoke(
            probe, stderr=subprocess.DEVNULL, check=True
        )
    assert not marker.exists()
    if call == "run":
        assert stand_in.run(probe, stderr=subprocess.DEVNULL).returncode != 0
        assert not marker.exists()

    other = [sys.executable, "-c", "import sys; sys.exit(3)"]
    with pytest.raises(subprocess.CalledProcessError):
        invoke(other) if call == "check_call" else invoke(other, check=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cprobe.so"]


def test_entry_names_only_listed_probes_as_loaded() -> None:
    from precompile.schema import EntryMeta, SourceLocation

    meta = EntryMeta(
        key="k",
        torch="2.11.0",
        triton=None,
        device_type="cpu",
        source=SourceLocation("f", None, None),
        dynamo=PickledRef("0" * 64),
        backends={},
        isa=(("ab/cprobe1.so", "1" * 64), ("cd/cprobe2.so", "2" * 64)),
        isa_loaded=("cd/cprobe2.so",),
    )
    doc = meta.to_json()
    assert EntryMeta.from_json(doc) == meta
    # Written before the field existed: no verdict recorded.
    assert EntryMeta.from_json({k: v for k, v in doc.items() if k != "isa_loaded"}).isa_loaded is None
    for bad in (["ef/cother.so"], "cd/cprobe2.so", [2]):
        with pytest.raises(FormatError, match="isa_loaded"):
            EntryMeta.from_json({**doc, "isa_loaded": bad})


@pytest.mark.torch
def test_every_kernel_file_of_one_triton_binary_keeps_its_autotuning_result(tmp_path: Path) -> None:
    """Two Inductor kernel files can compile to one Triton binary (they differ
    only outside the Triton function); each has its own result file, and a
    graph using that binary must carry the one its kernel file reads."""
    triton = pytest.importorskip("triton")
    from torch._inductor.runtime.autotune_cache import AutotuneCache

    from precompile import _torch as tc

    config = triton.Config({"XBLOCK": 64}, num_warps=4, num_stages=1)
    written = []
    tc.autotune_capture.start()
    try:
        for name in ("ab/cfirst.py", "cd/csecond.py"):
            (tmp_path / name).parent.mkdir(parents=True)
            cache = AutotuneCache.create({}, str(tmp_path / name), "configs-hash")
            assert cache is not None and cache.local_cache is not None
            cache.save(config, 1_000_000, triton_cache_hash="SAMEBINARY")
            written.append(cache.local_cache[1])
        assert tc.autotune_capture.paths_for("SAMEBINARY") == sorted(written)
        assert all(Path(p).is_file() for p in written)
        assert tc.autotune_capture.paths_for("OTHERBINARY") == []
    finally:
        tc.autotune_capture.stop()


def _static_autotuner(filename: str | None) -> object:
    """A static autotuner as Inductor's bundler records one, with just the
    kernel file set (building a real kernel needs a GPU)."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner
    from torch._inductor.triton_bundler import StaticallyLaunchedAutotuner

    kernel = CachingAutotuner.__new__(CachingAutotuner)
    kernel.filename = filename
    return StaticallyLaunchedAutotuner("key", "triton_red_fused_0", kernel)


def test_static_autotuners_name_their_kernel_file_relative_to_the_cache_dir(tmp_path: Path) -> None:
    from precompile._torch import local_static_autotuners, portable_static_autotuners

    saving, loading = tmp_path / "saving", tmp_path / "loading"
    name = "cabcdefghijklmnop.py"
    live = _static_autotuner(str(saving / "ab" / name))
    elsewhere = _static_autotuner("/opt/kernels/zz/" + name)
    stored = portable_static_autotuners([live, elsewhere, _static_autotuner(None)], str(saving))
    assert stored[0].kernel.filename == os.path.join("ab", name)
    assert live.kernel.filename == str(saving / "ab" / name)  # the live one keeps its path
    assert stored[1] is elsewhere and stored[2].kernel.filename is None
    loaded = local_static_autotuners(stored, str(loading))
    assert loaded[0].kernel.filename == str(loading / "ab" / name)
    # An absolute name outside Inductor's layout names no file at all.
    assert loaded[1].kernel.filename is None


def test_an_absolute_kernel_file_from_an_older_store_moves_to_this_hosts_dir(tmp_path: Path) -> None:
    from precompile._torch import local_static_autotuners

    name = "cq3arcwgrok2frhh7skviqwnpans5k64f.py"
    old = _static_autotuner(f"/tmp/other-host/inductor/q3/{name}")
    here = _static_autotuner(str(tmp_path / "q3" / name))
    escaping = _static_autotuner("../../etc/q3/" + name)
    loaded = local_static_autotuners([old, here, escaping], str(tmp_path))
    assert loaded[0].kernel.filename == str(tmp_path / "q3" / name)
    assert loaded[1].kernel.filename == str(tmp_path / "q3" / name)
    assert loaded[2].kernel.filename is None  # never outside the cache dir


@pytest.mark.torch
def test_a_loaded_kernel_writes_its_tuning_result_beside_its_local_file(tmp_path: Path) -> None:
    """The result writer a static autotuner is pickled with names the saving
    host's file; loaded, a kernel tuned at its first launch writes its winner
    in this host's cache dir (seen under max-autotune on an H100, where the
    loading process wrote into the saving host's Inductor dir). A stored
    name of another shape writes nothing."""
    import pickle

    triton = pytest.importorskip("triton")
    from torch._inductor.runtime.autotune_cache import AutotuneCache

    from precompile._torch import local_static_autotuners

    saving, loading = tmp_path / "saving", tmp_path / "loading"
    name = "cq3arcwgrok2frhh7skviqwnpans5k64f.py"
    (loading / "q3").mkdir(parents=True)
    stored = []
    for other_shape in (None, "x.best_config.py"):
        cache = AutotuneCache.create({}, str(saving / "q3" / name), "configs-hash")
        assert cache is not None and cache.local_cache is not None
        if other_shape is not None:
            cache.local_cache = (cache.local_cache[0], str(saving / "q3" / other_shape))
        autotuner: Any = _static_autotuner(str(saving / "q3" / name))
        autotuner.kernel.save_cache_hook = pickle.loads(pickle.dumps(cache)).save  # as a store unpickles it
        stored.append(autotuner)
    for autotuner in local_static_autotuners(stored, str(loading)):
        autotuner.kernel.save_cache_hook(triton.Config({"XBLOCK": 64}), 1_000_000, found_by_coordesc=True)
    assert not saving.exists()
    assert [p.parent for p in loading.rglob("*.best_config")] == [loading / "q3"]


@pytest.mark.torch
def test_a_graph_launches_its_own_coordesc_winner_whatever_the_hosts_result_names(tmp_path: Path) -> None:
    """Two graphs of one process that share a kernel's source are each tuned
    at their first launch, and the host's `.best_config` (kept where it is
    already there) names the first graph's winner. The second graph still
    launches the winner it was saved with (on an H100 it was tuned again,
    and its outputs changed in the last bits)."""
    triton = pytest.importorskip("triton")
    from torch._dynamo.utils import counters
    from torch._inductor.runtime.autotune_cache import AutotuneCache
    from torch._inductor.runtime.triton_heuristics import (
        CachingAutotuner,
        TritonCompileResult,
        hash_configs,
        triton_config_to_hashable,
    )

    from precompile import _torch as tc
    from precompile._torch.coordesc import WINNER_ATTR

    first, second = (triton.Config({"XBLOCK": x}, num_warps=4, num_stages=1) for x in (64, 128))
    (tmp_path / "ab").mkdir()

    def kernel(stored: triton.Config) -> Any:
        k: Any = CachingAutotuner.__new__(CachingAutotuner)
        k.filename = str(tmp_path / "ab" / "cabcdefghijklmnop.py")
        k.inductor_meta = {"coordinate_descent_tuning": True}
        k.compile_results = []
        for config in (first, second):
            result: Any = TritonCompileResult.__new__(TritonCompileResult)
            result.config = triton.Config(config.kwargs, num_warps=4, num_stages=1)
            k.compile_results.append(result)
        k.__dict__[WINNER_ATTR] = (stored, None)  # as a stored graph's kernel carries it
        return k

    host = AutotuneCache.create(
        {"coordinate_descent_tuning": True}, kernel(first).filename, hash_configs([first, second])
    )
    assert host is not None
    host.save(first, 1_000_000, found_by_coordesc=True)  # the first graph's winner

    tc.coordesc_winners.start()
    try:
        loaded = counters["precompile"]["coordesc_winners_loaded"]
        for stored in (second, first):
            k = kernel(stored)
            chosen = next(r for r in k.compile_results if r.config.kwargs == stored.kwargs)
            CachingAutotuner.recheck_autotune_cache(k, lambda: pytest.fail("the kernel was built again"))
            assert k.compile_results == [chosen]
            assert chosen.config.found_by_coordesc
            assert k.autotune_cache_info["best_config"] == triton_config_to_hashable(stored)
            assert WINNER_ATTR not in k.__dict__
        assert counters["precompile"]["coordesc_winners_loaded"] == loaded + 2
    finally:
        tc.coordesc_winners.stop()
