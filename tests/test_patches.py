"""One test per torch patch of kernels, probes, caches and installs: each
shows what the patch adapts with the store installed, then turns that one
patch off and shows the same check fail. A patch this torch leaves inactive
(torch needs no adaptation) skips its test. The guard and frame patches are
in test_patches_guards.py.
"""

from __future__ import annotations

import collections
import os
import pickle
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from support.patches import off, require, tc
from support.torch_contract import forget
from torch._dynamo.precompile_context import PrecompileContext
from torch._dynamo.utils import counters

import precompile
from precompile._torch.templates import _LazyTemplate as LazyTemplate

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def inductor_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One Inductor cache for the module: a graph compiled twice is built once."""
    return tmp_path_factory.mktemp("inductor")


@pytest.fixture
def store(tmp_path: Path, inductor_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(inductor_dir))
    forget()
    path = tmp_path / "store"
    with precompile.installed(path, save_on_exit=False):
        yield path
    forget()


# A module switch the guards of `_switched` read, saved by name with its value.
_switches = types.ModuleType("precompile_patch_switches")
_switches.FAST = True  # type: ignore[attr-defined]
sys.modules[_switches.__name__] = _switches


def _switched(x: torch.Tensor) -> torch.Tensor:
    return x + 1 if _switches.FAST else x - 1


def _sin_plus(x: torch.Tensor) -> torch.Tensor:
    return x.sin() + 1


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory, inductor_dir: Path) -> Iterator[Path]:
    """A store holding `_sin_plus` and `_switched` compiled by Inductor."""
    path = tmp_path_factory.mktemp("saved") / "store"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TORCHINDUCTOR_CACHE_DIR", str(inductor_dir))
        forget(_sin_plus, _switched)
        with precompile.installed(path, save_on_exit=False):
            x = torch.ones(3)
            torch.compile(_sin_plus)(x)
            torch.compile(_switched)(x)
            assert len(precompile.save().entries) == 2
        forget(_sin_plus, _switched)
    yield path


def test_kernel_capture_attributes_each_library_to_the_graph_loading_it(store: Path, tmp_path: Path) -> None:
    require(tc.kernel_capture)
    from torch._inductor.codecache import PyCodeCache

    library = torch._C.__file__  # any loadable shared library serves

    def libraries(graph_key: str) -> list[tuple[str, str, str]]:
        # A graph's module loads its C++ kernels while it executes.
        module = tmp_path / f"{graph_key}.py"
        module.write_text(
            f"from torch._inductor.codecache import CppCodeCache\nCppCodeCache._load_library({library!r}, 'lib')\n"
        )
        PyCodeCache.load_by_key_path(graph_key, str(module))
        return tc.kernel_capture.libraries_for(graph_key)

    assert libraries("precompile_test_graph_on") == [(os.path.abspath(library), "lib", "CppCodeCache")]
    with off(tc.kernel_capture):
        assert libraries("precompile_test_graph_off") == []


def test_probe_load_marks_trust_a_marked_probe(store: Path, tmp_path: Path) -> None:
    require(tc.probe_load_marks)
    from torch._inductor import cpu_vec_isa

    # Not a library: only a trusted marker lets its probe pass.
    library = tmp_path / "probe.so"
    library.write_bytes(b"not a library")
    (tmp_path / "probe.so.load_ok").touch()
    program = cpu_vec_isa.VecISA._avx_py_load.replace("__lib_path__", str(library))
    command = [sys.executable, "-c", program]

    assert cpu_vec_isa.subprocess.check_call(command) == 0
    with off(tc.probe_load_marks), pytest.raises(subprocess.CalledProcessError):
        cpu_vec_isa.subprocess.check_call(command, stderr=subprocess.DEVNULL)


def test_autotune_capture_records_each_result_file(store: Path, tmp_path: Path) -> None:
    require(tc.autotune_capture)
    triton = pytest.importorskip("triton")
    from torch._inductor.runtime.autotune_cache import AutotuneCache

    config = triton.Config({"XBLOCK": 64}, num_warps=4, num_stages=1)

    def saved_result(name: str, binary: str) -> str:
        (tmp_path / name).parent.mkdir(parents=True)
        cache = AutotuneCache.create({}, str(tmp_path / name), "configs-hash")
        assert cache is not None and cache.local_cache is not None
        cache.save(config, 1_000_000, triton_cache_hash=binary)
        return cache.local_cache[1]

    written = saved_result("ab/con.py", "BINARYON")
    assert tc.autotune_capture.paths_for("BINARYON") == [written]
    with off(tc.autotune_capture):
        assert Path(saved_result("cd/coff.py", "BINARYOFF")).is_file()
        assert tc.autotune_capture.paths_for("BINARYOFF") == []


def test_guard_evaluation_refuses_an_expression_outside_the_allowlist(store: Path) -> None:
    require(tc.guard_evaluation)
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    shape_env = ShapeEnv()
    unsafe = "L['t0'].__class__ is int"  # `eval` runs it; the allowlist has no dunder attribute
    assert shape_env.evaluate_guards_expression("L['t0'] == 3", [3]) is True
    assert shape_env.evaluate_guards_expression(unsafe, [3]) is False
    assert counters["precompile"]["guards_refused"] == 1
    with off(tc.guard_evaluation):
        assert shape_env.evaluate_guards_expression(unsafe, [3]) is True
    assert counters["precompile"]["guards_refused"] == 1


def test_backend_capture_records_a_hit_torch_did_not(store: Path) -> None:
    """On CPU torch records its own hits; the CUDA path that does not is
    stood in for by a lookup that serves a result and records nothing."""
    require(tc.backend_capture)
    from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache

    served = ("served result", None)

    def lookup(key: str, local: bool, remote: bool, args: object, cache_info: object, aot_config: object) -> object:
        return served

    def hit(backend_id: str) -> object:
        config = types.SimpleNamespace(precompile_backend_id=backend_id)
        assert AOTAutogradCache._lookup("key", True, False, [], {}, config) is served
        return PrecompileContext.serialize_artifact_by_key(backend_id)

    tc.backend_capture.stop()
    torchs = vars(AOTAutogradCache)["_lookup"]
    AOTAutogradCache._lookup = staticmethod(lookup)  # the stand-in is now torch's lookup
    try:
        tc.backend_capture.start()
        assert hit("backend-on") is not None
        assert counters["precompile"]["backends_captured"] == 1
        tc.backend_capture.stop()
        assert hit("backend-off") is None
    finally:
        tc.backend_capture.stop()
        AOTAutogradCache._lookup = torchs
        tc.backend_capture.start()


def _deque_of(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def test_object_aliases_binds_a_class_alias_at_install(store: Path, tmp_path: Path) -> None:
    """A package holding a `module:qualname` alias, as Dynamo records for a
    class it binds under `___module_*`: torch imports every alias as a module."""
    require(tc.object_aliases)
    from torch._dynamo.package import CompilePackage, DiskDynamoStore

    disk = DiskDynamoStore()
    path = str(tmp_path / "by-hand")
    package = CompilePackage(_deque_of)
    torch._dynamo.optimize(backend="eager", package=package)(_deque_of)(torch.ones(2))
    for backend_id, backend in package.cached_backends.items():
        disk.record_eager_backend(backend_id, backend)
    disk.save_package(package, path)
    module = sys.modules[__name__]

    def bound_alias() -> object:
        forget(_deque_of)
        loaded, backends = disk.load_package(_deque_of, path)
        for entry in loaded._codes.values():
            entry.import_sources["___module_precompile_deque"] = "collections:deque"
        try:
            loaded.install(backends)
            return vars(module)["___module_precompile_deque"]
        finally:
            loaded.uninstall()
            vars(module).pop("___module_precompile_deque", None)
            forget(_deque_of)

    assert bound_alias() is collections.deque
    with off(tc.object_aliases), pytest.raises(ModuleNotFoundError, match="collections:deque"):
        bound_alias()


def test_install_hardening_turns_a_failed_install_into_a_compile(
    saved: Path, inductor_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(inductor_dir))
    original = precompile.StoreDynamoCache.load

    def damaged(self: precompile.StoreDynamoCache, fn: object) -> object:
        # A guard state that no longer unpickles, as when it names something
        # this process lacks.
        entry = original(self, fn)
        for code in entry.dynamo.codes:
            for guarded in code.guarded_codes:
                guarded.guards_state = b"\x80\x05not a pickle"
        return entry

    monkeypatch.setattr(precompile.StoreDynamoCache, "load", damaged)
    x = torch.ones(3)
    with precompile.installed(saved, save_on_exit=False):
        require(tc.install_hardening)
        forget(_sin_plus)
        with pytest.warns(precompile.PrecompileWarning, match="install_failed"):
            torch.testing.assert_close(torch.compile(_sin_plus)(x), _sin_plus(x))
        assert counters["precompile"]["install_failed"] == 1
        forget(_sin_plus)
        try:
            with off(tc.install_hardening), pytest.raises(pickle.UnpicklingError):
                torch.compile(_sin_plus)(x)
        finally:
            forget(_sin_plus)


def test_unbuildable_guards_refuse_a_variant_whose_saved_data_changed(
    saved: Path, inductor_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(inductor_dir))
    monkeypatch.setattr(_switches, "FAST", False)  # saved with True
    x = torch.ones(3)
    with precompile.installed(saved, save_on_exit=False):
        require(tc.unbuildable_guards)
        forget(_switched)
        try:
            with pytest.warns(precompile.PrecompileWarning, match="guard_failed"):
                torch.testing.assert_close(torch.compile(_switched)(x), x - 1)
            assert counters["precompile"]["variants_unbuildable"] == 1
            forget(_switched)
            with off(tc.unbuildable_guards):
                # torch rebuilds the guard on the value it finds and runs the
                # code traced with the saved one.
                torch.testing.assert_close(torch.compile(_switched)(x), x + 1)
            assert counters["precompile"]["variants_unbuildable"] == 0
        finally:
            forget(_switched)


def test_lazy_kernel_templates_compile_on_first_use(store: Path) -> None:
    require(tc.lazy_kernel_templates)
    from torch._inductor.codegen.common import KernelTemplate

    template = KernelTemplate._template_from_string("{{ n }} blocks")
    assert isinstance(template, LazyTemplate) and template._template is None
    assert template.render(n=2) == "2 blocks"
    with off(tc.lazy_kernel_templates):
        built = KernelTemplate._template_from_string("{{ n }} blocks")
        assert not isinstance(built, LazyTemplate)
        assert built.render(n=2) == "2 blocks"


def test_backend_setup_gc_defers_full_collections(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require(tc.backend_setup_gc)
    import gc

    seen: list[int] = []
    wrapper = torch._TorchCompileInductorWrapper

    def spy() -> None:
        # Over whatever is in place now: `off` restarts the patches after
        # backend_setup_gc (lean_backend_config wraps this method too).
        setup = wrapper.get_compiler_config

        def get_compiler_config(self: object) -> object:
            seen.append(gc.get_threshold()[2])
            return setup(self)

        monkeypatch.setattr(wrapper, "get_compiler_config", get_compiler_config)

    before = gc.get_threshold()[2]
    deferred = max(before, getattr(torch._dynamo.config, "gc_gen2_threshold_during_compile", None) or 1000)
    assert deferred != before, "full collections are deferred already outside torch.compile"
    spy()
    torch.compile(_sin_plus)  # backend setup runs as torch.compile wraps (twice on torch 2.12)
    installed = set(seen)
    seen.clear()
    with off(tc.backend_setup_gc):
        spy()
        torch.compile(_sin_plus)
    assert (installed, set(seen)) == ({deferred}, {before})


def test_guard_state_handoff_gives_install_the_checked_state(store: Path) -> None:
    require(tc.guard_state_handoff)
    import torch._dynamo.package as dynamo_package

    data = pickle.dumps({"state": 1})
    checked = tc.load_guards_state(data)
    assert dynamo_package.load_guards_state(data) is checked
    with off(tc.guard_state_handoff):
        checked = tc.load_guards_state(data)
        again = dynamo_package.load_guards_state(data)
        assert again == checked and again is not checked


def _weighted(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x * w).sin().sum(0)


def _weighted_cos(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    # Another graph: AOTAutogradCache holds none for it, forward or backward.
    return (x * w).cos().sum(0)


def test_pending_backwards_compile_at_save_a_backward_that_never_ran(store: Path) -> None:
    """`w` requires grad: a training graph, whose backward torch compiles on
    the first backward call. The save compiles it instead, and a backward
    call afterwards uses that compile."""
    require(tc.pending_backwards)
    x, w = torch.randn(3, 4), torch.randn(4, requires_grad=True)
    out = torch.compile(_weighted)(x, w)
    report = precompile.save()
    assert report.missing_backends == 0 and report.backends == 1
    assert counters["precompile"]["backward_compiled_at_save"] == 1
    compiled = counters["inductor"]["fxgraph_cache_miss"] + counters["inductor"]["fxgraph_cache_hit"]
    out.sum().backward()
    assert counters["inductor"]["fxgraph_cache_miss"] + counters["inductor"]["fxgraph_cache_hit"] == compiled
    assert w.grad is not None
    torch.testing.assert_close(w.grad, (x * (x * w.detach()).cos()).sum(0))

    forget(_weighted)
    with off(tc.pending_backwards):
        torch.compile(_weighted_cos)(x, w)
        with pytest.warns(precompile.PrecompileWarning, match="never recorded"):
            report = precompile.save()
    assert report.missing_backends == 1
    forget(_weighted_cos)


def test_marked_probe_lookup_names_torchs_own_probe_library(store: Path) -> None:
    require(tc.marked_probe_lookup)
    from torch._inductor import cpu_vec_isa
    from torch._inductor.cpp_builder import CppBuilder, CppTorchOptions

    lookup = tc.marked_probe_lookup.library
    assert lookup is not None
    isas = [isa for isa in cpu_vec_isa.supported_vec_isa_list]
    assert isas
    for isa in isas:
        for code in (cpu_vec_isa.VecISA._avx_code, "int main() { return 0; }\n"):
            path = lookup(isa, code)
            # torch's own naming: the builder check_build makes, with its options.
            builder = CppBuilder(
                os.path.basename(path)[: -len(".so")],
                [path[: -len(".so")] + ".cpp"],
                CppTorchOptions(vec_isa=isa, warning_all=False),
                os.path.dirname(path),
            )
            assert builder.get_target_file_path() == path
            assert Path(path[: -len(".so")] + ".cpp").read_text() == code


def test_marked_probe_lookup_answers_a_marked_probe_without_build_options(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require(tc.marked_probe_lookup)
    from torch._inductor import cpp_builder, cpu_vec_isa

    isa = cpu_vec_isa.supported_vec_isa_list[0]
    code = "/* precompile marked probe */ int main() { return 0; }\n"
    lookup = tc.marked_probe_lookup.library
    assert lookup is not None
    library = Path(lookup(isa, code))
    # Not a library: only the marker beside it can make the check pass.
    library.write_bytes(b"not a library")
    (library.parent / (library.name + ".load_ok")).touch()
    built = []
    real = cpp_builder.CppTorchOptions.__init__

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        built.append(kwargs.get("vec_isa"))
        real(self, *args, **kwargs)

    monkeypatch.setattr(cpp_builder.CppTorchOptions, "__init__", counted)
    assert isa.check_build(code) is True
    assert built == []
    with off(tc.marked_probe_lookup):
        assert isa.check_build(code) is True  # torch's own check: the same verdict, built options
    assert built == [isa]
    # No marker: torch's check runs (and the bytes fail to load or build).
    (library.parent / (library.name + ".load_ok")).unlink()
    built.clear()
    isa.check_build(code)
    assert built == [isa]


# A compiled training step whose backward runs inside it: torch compiles the
# lazy backward in that eager region, through the adapter's hooks, while
# Dynamo's frame callback is set. Prints the graph-break reasons Dynamo
# counted (first line of each) and the adapter's frames it was handed.
_TRAINING_STEP = """
    import json, sys
    import torch
    import torch._dynamo.convert_frame as convert_frame
    from torch._dynamo.utils import counters
    handed = []
    converter = convert_frame.ConvertFrame.__call__
    def noting(self, frame, *args, **kwargs):
        if "precompile" in frame.f_code.co_filename.replace("\\\\", "/").split("/"):
            handed.append(frame.f_code.co_name)
        return converter(self, frame, *args, **kwargs)
    convert_frame.ConvertFrame.__call__ = noting
    if sys.argv[1] != "-":
        import precompile
        precompile.install(sys.argv[1], save_on_exit=False)
    def step(w, x):
        loss = (x @ w).sin().sum()
        loss.backward()
        return loss.detach()
    torch.manual_seed(0)
    w = torch.randn(4, 3, requires_grad=True)
    compiled = torch.compile(step)
    losses = [compiled(w, torch.randn(2, 4)) for _ in range(2)]
    reasons = {group: sorted({k.splitlines()[0] for k in counters[group]}) for group in ("graph_break", "unimplemented")}
    print(json.dumps({"reasons": reasons, "handed": handed, "grad": w.grad.tolist()}))
"""


def _training_step(store: Path | str, **env: str) -> dict[str, Any]:
    import json
    import textwrap

    from support.processes import child_env

    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_TRAINING_STEP), str(store)],
        capture_output=True,
        text=True,
        env=child_env(env),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_own_frames_skipped_keeps_dynamo_out_of_the_adapter(store: Path, tmp_path: Path) -> None:
    """The graph breaks a training step counts are torch's own: Dynamo is
    never handed the adapter's frames. With the patch off, it traces the
    kept-backward compiler and counts a graph break on its lock."""
    require(tc.own_frames_skipped)
    fresh = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-torch")}
    plain = _training_step("-", **fresh)
    stored = _training_step(tmp_path / "store-on", TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor-on"))
    assert stored["reasons"] == plain["reasons"]
    assert stored["handed"] == []
    torch.testing.assert_close(torch.tensor(stored["grad"]), torch.tensor(plain["grad"]))

    unskipped = _training_step(
        tmp_path / "store-off",
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor-off"),
        PRECOMPILE_PATCHES_OFF="own_frames_skipped",
    )
    assert "__call__" in unskipped["handed"]
    assert unskipped["reasons"] != plain["reasons"]


def _by_dtype(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def _recorded_variants(fn: Any) -> int:
    from torch._dynamo.package import CompilePackage

    source_id = CompilePackage.source_id_from_fn(fn)
    entries = [e for k, e in tc.recorded_entries().items() if tc.source_id_of_key(k) == source_id]
    assert len(entries) == 1, list(tc.recorded_entries())
    return tc.loaded_variant_count(entries[0])


def _two_wrappers_two_dtypes() -> int:
    """The variants recorded for `_by_dtype` after two plain wrappers of it
    each compiled one dtype (two packages of one lineage)."""
    first, second = torch.compile(_by_dtype, backend="eager"), torch.compile(_by_dtype, backend="eager")
    first(torch.ones(3))
    second(torch.ones(3, dtype=torch.float64))
    return _recorded_variants(_by_dtype)


def test_shared_lineage_entries_record_every_wrappers_variants(store: Path) -> None:
    require(tc.shared_lineage_entries)
    forget(_by_dtype)
    assert _two_wrappers_two_dtypes() == 2
    # `reset()` empties Dynamo's in-process cache: recording starts over, as
    # torch's does, with what the wrapper compiling next holds.
    keep = torch.compile(_by_dtype, backend="eager")
    keep(torch.ones(3, dtype=torch.int64))
    torch._dynamo.reset()
    torch.compile(_by_dtype, backend="eager")(torch.ones(3, dtype=torch.int32))
    assert _recorded_variants(_by_dtype) == 1
    forget(_by_dtype)
    with off(tc.shared_lineage_entries):
        assert _two_wrappers_two_dtypes() == 1
    forget(_by_dtype)


def _scaled_cos(x: torch.Tensor, k: float) -> torch.Tensor:
    return x.cos() * k


class _Shifted:
    def __init__(self, by: float) -> None:
        self.by = by

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x.sin() + self.by


def test_callable_objects_store_a_partial_and_a_callable_object(store: Path) -> None:
    require(tc.callable_objects)
    import functools

    x = torch.ones(3)
    forget(_scaled_cos, _Shifted.__call__)
    torch.testing.assert_close(torch.compile(functools.partial(_scaled_cos, k=2.0))(x), x.cos() * 2)
    torch.testing.assert_close(torch.compile(_Shifted(1.0))(x), x.sin() + 1)
    assert len(precompile.save().entries) == 2
    forget(_scaled_cos, _Shifted.__call__)
    counters.clear()
    with torch.compiler.set_stance("fail_on_recompile"):
        torch.testing.assert_close(torch.compile(functools.partial(_scaled_cos, k=2.0))(x), x.cos() * 2)
        torch.testing.assert_close(torch.compile(_Shifted(1.0))(x), x.sin() + 1)
    assert counters["precompile"]["frames_loaded"] == 2, dict(counters["precompile"])
    forget(_scaled_cos, _Shifted.__call__)
    # torch keys a wrapper by the callable's own qualified name and code.
    with off(tc.callable_objects), pytest.raises(AttributeError, match="__qualname__"):
        torch.compile(functools.partial(_scaled_cos, k=2.0))(x)
    forget(_scaled_cos, _Shifted.__call__)


class _DoubledGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * 2


def _through_custom_autograd(x: torch.Tensor) -> torch.Tensor:
    return _DoubledGrad.apply(x.sin()).sum()


def _save_warnings() -> list[str]:
    x = torch.ones(3, requires_grad=True)
    torch.compile(_through_custom_autograd)(x).backward()
    with pytest.warns(precompile.PrecompileWarning) as caught:
        precompile.save()
    return [str(w.message) for w in caught if "never recorded" in str(w.message)]


# torch 2.11's Dynamo instantiates the Function class while tracing it.
@pytest.mark.filterwarnings("ignore:.*should not be instantiated:DeprecationWarning")
def test_bypass_reasons_name_why_a_backend_was_never_recorded(store: Path) -> None:
    require(tc.bypass_reasons)
    forget(_through_custom_autograd)
    (warned,) = _save_warnings()
    assert "AOTAutograd's cache bypassed its graph: Unsupported call_function target autograd_function_apply" in warned
    assert "TORCHINDUCTOR_AUTOGRAD_CACHE_ALLOW_CUSTOM_AUTOGRAD=1" in warned
    forget(_through_custom_autograd)
    with off(tc.bypass_reasons):
        (warned,) = _save_warnings()
    assert "bypassed its graph" not in warned
    forget(_through_custom_autograd)
