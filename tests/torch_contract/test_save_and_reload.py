"""Saving and reloading through torch's API: the store is invisible.

`save_to_dynamo_cache` returns torch's own result (with the store's report
added), a reload serves every frame and every backend without compiling,
`fail_on_recompile` still fails where nothing was saved, `DynamoCache.clear`
forgets, the Mega-Cache artifacts report and serve as torch's, and an entry
that does not serialize is skipped while the rest are saved.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch._dynamo.convert_frame as convert_frame
from support.torch_contract import functions, reset
from torch._dynamo.package import DynamoCache
from torch._dynamo.precompile_context import PrecompileContext
from torch._dynamo.utils import counters

import precompile
from precompile.entries import REF_PREFIX

pytestmark = pytest.mark.torch


def test_save_to_dynamo_cache_returns_torchs_result(store: Path) -> None:
    _sin_cos, _cos_plus, _with_break = functions()
    a, b = torch.randn(3, 2), torch.randn(5, 2)
    expected = [_sin_cos(a), _cos_plus(b)]
    torch.testing.assert_close([torch.compile(_sin_cos)(a), torch.compile(_cos_plus)(b)], expected)
    entries = dict(PrecompileContext._dynamo_cache_entries)
    backends = dict(PrecompileContext._backend_artifacts_by_key)
    torchs = PrecompileContext.dump_debug_info(entries, backends)

    info = PrecompileContext.save_to_dynamo_cache()

    assert len(info["dynamo"]) == 2
    assert len(info["backends"]) == 2
    assert {k: v for k, v in info.items() if k != "precompile"} == dict(torchs)
    report = info["precompile"]
    assert report["missing_backends"] == 0
    assert report["backends"] == 2
    assert set(report["entries"]) == set(entries)


def test_reload_serves_every_frame_without_recompiling(store: Path) -> None:
    _sin_cos, _cos_plus, _with_break = functions()
    a, b = torch.randn(3, 2), torch.randn(5, 2)
    expected = [_sin_cos(a), _cos_plus(b)]
    torch.compile(_sin_cos)(a)
    torch.compile(_cos_plus)(b)
    DynamoCache.clear()
    frames = convert_frame.FRAME_COUNTER
    PrecompileContext.save_to_dynamo_cache()
    reset()

    with torch.compiler.set_stance("fail_on_recompile"):
        got = [torch.compile(_sin_cos)(a), torch.compile(_cos_plus)(b)]
    torch.testing.assert_close(got, expected)
    # Loading compiles no frame: the counter stands where the cold run left it.
    assert frames == convert_frame.FRAME_COUNTER
    assert counters["dynamo_cache"]["dynamo_cache_hit"] == 2


def test_a_graph_break_reload_installs_every_backend(store: Path) -> None:
    _sin_cos, _cos_plus, _with_break = functions()
    x = torch.randn(4, 4)
    expected = _with_break(x)
    torch.compile(_with_break)(x)
    info = PrecompileContext.save_to_dynamo_cache()
    assert len(info["backends"]) == 2
    reset()

    entry = DynamoCache.load(_with_break)
    assert entry is not None
    assert sorted(entry.backends) == sorted(info["backends"])
    reset()
    with torch.compiler.set_stance("fail_on_recompile"):
        torch.testing.assert_close(torch.compile(_with_break)(x), expected)


# Dynamo reads `.grad` of the resume frame's non-leaf input while it traces.
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")
def test_a_backend_taken_out_after_its_backward_ran_is_saved_missing(store: Path) -> None:
    """torch's contract (test_package's `test_graph_break_partial_backend`): a
    backend no longer in PrecompileContext at save is saved missing, and the
    loading process compiles that one frame again. The store keeps each
    deferred backward to compile at save; one whose backward torch already
    ran (and recorded then) is not recorded again."""
    _sin_cos, _cos_plus, _with_break = functions()
    x = torch.randn(3, 2, requires_grad=True)
    expected = torch.compile(_with_break)(x)
    expected.sum().backward()
    (dynamo_entry,) = PrecompileContext._dynamo_cache_entries.values()
    (resumed,) = [c for c in dynamo_entry.codes if any("resume" in n for n in c.function_names)]
    (backend_id,) = resumed.backend_ids
    del PrecompileContext._backend_artifacts_by_key[backend_id]
    with pytest.warns(precompile.PrecompileWarning, match=f"{backend_id} was never recorded"):
        info = PrecompileContext.save_to_dynamo_cache()
    assert info["precompile"]["missing_backends"] == 1
    reset()
    compiled = counters["frames"]["total"]
    with pytest.warns(precompile.PrecompileWarning, match=r"miss \(bypassed\)"):
        again = torch.compile(_with_break)(x.detach().clone().requires_grad_(True))
    again.sum().backward()
    torch.testing.assert_close(again, expected)
    assert counters["precompile"]["frames_loaded"] == 1, dict(counters["precompile"])
    # One frame compiled again: the resume frame, whose backend was missing.
    assert counters["frames"]["total"] == compiled + 1


def test_fail_on_recompile_still_fails_without_an_entry(store: Path) -> None:
    _sin_cos, _cos_plus, _with_break = functions()
    torch.compile(_sin_cos)(torch.randn(3, 2))
    # Nothing saved: the store holds no entry, so this is a recompile.
    reset()
    with torch.compiler.set_stance("fail_on_recompile"), pytest.raises(RuntimeError, match="fail_on_recompile"):
        torch.compile(_sin_cos)(torch.randn(3, 2))
    assert counters["dynamo_cache"]["dynamo_cache_miss"] >= 1


def test_dynamo_cache_clear_forgets_entries(store: Path) -> None:
    _sin_cos, _cos_plus, _with_break = functions()
    torch.compile(_sin_cos)(torch.randn(3, 2))
    PrecompileContext.save_to_dynamo_cache()
    assert precompile.Store(str(store)).refs(REF_PREFIX)
    DynamoCache.clear()
    assert precompile.Store(str(store)).refs(REF_PREFIX) == []
    reset()
    assert DynamoCache.load(_sin_cos) is None


def _sin_matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x.sin() @ y


def _sin_matmul_step(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = torch.compile(_sin_matmul)(a, b)
    out.sum().backward()
    return out.detach()


def _artifact_counts(info: object) -> tuple[int, ...]:
    kinds = ("inductor", "autotune", "aot_autograd", "pgo", "precompile")
    return tuple(len(getattr(info, f"{kind}_artifacts")) for kind in kinds)


def test_mega_cache_artifacts_report_and_serve_as_torchs(store: Path, tmp_path: Path) -> None:
    from torch._C._dynamo.eval_frame import _reset_precompile_entries
    from torch._inductor.utils import fresh_cache
    from torch.compiler._cache import CacheArtifactManager

    # torch's own hot-load test (test_cache_hot_load_caching_precompile),
    # with its counts, against the store: a compiled training step's
    # artifacts, then a host with fresh caches and an empty store.
    CacheArtifactManager.clear()
    a = torch.rand(16, 16, requires_grad=True)
    b = torch.rand(16, 16, requires_grad=True)
    expected = _sin_matmul(a, b).detach()
    with fresh_cache():
        torch.testing.assert_close(_sin_matmul_step(a, b), expected)
    assert counters["aot_autograd"]["autograd_cache_miss"] == 1
    assert counters["dynamo_cache"]["dynamo_cache_miss"] == 1
    saved = torch.compiler.save_cache_artifacts()
    assert saved is not None
    artifact_bytes, info = saved
    assert _artifact_counts(info) == (2, 0, 1, 0, 1)
    reset()
    _reset_precompile_entries(_sin_matmul.__code__)
    counters.clear()
    precompile.uninstall()
    try:
        with (
            precompile.installed(tmp_path / "other-host", save_on_exit=False),
            fresh_cache(),
            torch.compiler.set_stance("fail_on_recompile"),
        ):
            info = torch.compiler.load_cache_artifacts(artifact_bytes)
            assert info is not None and _artifact_counts(info) == (2, 0, 1, 0, 1)
            torch.testing.assert_close(_sin_matmul_step(a, b), expected)
            assert counters["dynamo_cache"]["dynamo_cache_hit"] == 1
            assert counters["dynamo_cache"]["dynamo_cache_miss"] == 0
            assert counters["aot_autograd"]["autograd_cache_miss"] == 0
            assert counters["aot_autograd"]["autograd_cache_hit"] == 0
    finally:
        _reset_precompile_entries(_sin_matmul.__code__)
        CacheArtifactManager.clear()


def test_an_entry_that_does_not_serialize_is_skipped_and_the_rest_saved(store: Path) -> None:
    sin_cos, cos_plus, _ = functions()
    x = torch.randn(3)
    torch.compile(sin_cos)(x)
    torch.compile(cos_plus)(x)
    entries = PrecompileContext._dynamo_cache_entries
    (bad_key,) = [k for k, e in entries.items() if e.fn_name.endswith("cos_plus")]
    # Generated code holding a constant pickle cannot carry (a function with
    # a closure): the shape of what Dynamo's bytecode can hold.
    import dataclasses

    guarded = entries[bad_key].codes[0].guarded_codes[0]
    captured = torch.ones(1)
    code = guarded.dynamo_code
    object.__setattr__(guarded, "dynamo_code", dataclasses.replace(code, co_consts=(*code.co_consts, lambda: captured)))

    with pytest.warns(precompile.PrecompileWarning, match="was not saved"):
        report = precompile.save()

    assert list(report.entries) == [k for k in entries if k != bad_key]
    assert bad_key in report.skipped and "PicklingError" in report.skipped[bad_key]
    assert counters["precompile"]["save_skipped"] == 1
    reset()
    with torch.compiler.set_stance("fail_on_recompile"):
        torch.testing.assert_close(torch.compile(sin_cos)(x), sin_cos(x))


def test_a_package_any_wrapper_saved_loads_by_hand(store: Path) -> None:
    """torch files one package per function, so its `DynamoCache.load_and_install_package(fn)`,
    called by hand, finds what a wrapper of a non-default backend saved (the
    store files that under the wrapper's lineage); the wrappers' next calls
    are served by what it installed, without a compile."""
    from torch._dynamo.package import CompilePackage

    sin_cos, cos_plus, _ = functions()
    a, b = torch.randn(3, 2), torch.randn(5, 2)
    first, second = CompilePackage(sin_cos), CompilePackage(cos_plus)
    compiled = [
        torch._dynamo.optimize(backend="inductor", package=first)(sin_cos),
        torch._dynamo.optimize(backend="inductor", package=second)(cos_plus),
    ]
    expected = [compiled[0](a), compiled[1](b)]
    DynamoCache.save(first)
    DynamoCache.save(second)
    frames = convert_frame.FRAME_COUNTER
    info = PrecompileContext.save_to_dynamo_cache()
    assert (len(info["dynamo"]), len(info["backends"])) == (2, 2)
    reset()

    assert DynamoCache.load_and_install_package(sin_cos) is not None
    assert DynamoCache.load_and_install_package(cos_plus) is not None
    with torch.compiler.set_stance("fail_on_recompile"):
        got = [compiled[0](a), compiled[1](b)]
    torch.testing.assert_close(got, expected)
    assert frames == convert_frame.FRAME_COUNTER
    assert counters["dynamo_cache"]["dynamo_cache_hit"] == 2


def test_a_load_by_hand_between_two_stored_lineages_is_a_named_miss(store: Path) -> None:
    """Two wrappers of one function, neither the default, each stored: a
    load outside both cannot tell whose graphs to install, and says so."""
    sin_cos, _, _ = functions()
    x = torch.randn(4, 3)
    torch.compile(sin_cos, dynamic=True)(x)
    torch.compile(sin_cos, options={"epilogue_fusion": False})(x)
    PrecompileContext.save_to_dynamo_cache()
    reset()

    with pytest.warns(precompile.PrecompileWarning, match="stored under 2 torch.compile wrappers"):
        assert DynamoCache.load_and_install_package(sin_cos) is None
    assert counters["precompile"]["miss_key_mismatch"] == 1
    # Each wrapper still loads its own.
    with torch.compiler.set_stance("fail_on_recompile"):
        torch.testing.assert_close(torch.compile(sin_cos, dynamic=True)(x), sin_cos(x))
