"""The DynamoCache surface: install, read, load, clear, and failures as misses."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from support.warm_start import load_scenario

import precompile

torch = pytest.importorskip("torch")
import torch._dynamo.package as dynamo_package  # noqa: E402
import torch._dynamo.precompile_context as precompile_context  # noqa: E402
from torch._dynamo.precompile_context import PrecompileContext  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

from precompile.artifacts import StoredBackendArtifact  # noqa: E402

pytestmark = pytest.mark.torch


def test_install_redirects_torchs_dynamo_cache_and_uninstall_restores(tmp_path: Path) -> None:
    # Code that imported torch's DynamoCache before install() holds the
    # object, so the object itself must serve from the store.
    early = dynamo_package.DynamoCache
    torch_prefix = early.path_prefix()
    flag = torch._dynamo.config.caching_precompile
    patched = _patched_by_install()
    torchs = [getattr(owner, name) for owner, name in patched]
    with precompile.installed(tmp_path / "s", save_on_exit=False) as cache:
        assert dynamo_package.DynamoCache is early
        assert precompile_context.DynamoCache is early
        assert early.path_prefix() == cache.path_prefix() == str((tmp_path / "s").resolve())
        assert torch._dynamo.config.caching_precompile is True
        again = precompile.install(tmp_path / "t", save_on_exit=False)
        assert early.path_prefix() == again.path_prefix() == str((tmp_path / "t").resolve())
    assert early.path_prefix() == torch_prefix
    assert not any(name in vars(early) for name in ("load", "write", "read", "clear"))
    assert torch._dynamo.config.caching_precompile == flag
    # Every patched attribute is torch's own again, wrappers of wrappers too.
    assert all(getattr(owner, name) is own for (owner, name), own in zip(patched, torchs))


def _patched_by_install() -> list[tuple[object, str]]:
    """Attributes of torch the store's patches wrap, most of them more than once."""
    import torch._dynamo.convert_frame as convert_frame
    import torch._dynamo.eval_frame as eval_frame
    from torch._dynamo.guards import CheckFunctionManager, GuardsStatePickler

    return [
        (eval_frame, "_optimize"),
        (dynamo_package.CompilePackage, "install"),
        (dynamo_package, "load_guard_manager"),
        (dynamo_package, "load_guards_state"),
        (convert_frame, "_compile"),
        (GuardsStatePickler, "reducer_override"),
        (CheckFunctionManager, "serialize_guards"),
    ]


def test_save_without_install_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="not installed"):
        precompile.save()


def test_read_and_load_cache_entry(compiled_store: tuple[Path, dict], tmp_path: Path, monkeypatch) -> None:
    store, a = compiled_store
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    (key,) = a["report"]["entries"]
    PrecompileContext.clear()
    with precompile.installed(store, save_on_exit=False) as cache:
        entry = cache.read(key)
        assert entry.dynamo.fn_name == "MLP.forward"
        (artifact,) = entry.backends.values()
        assert isinstance(artifact, StoredBackendArtifact)
        # The exact torch objects come back, debug text included (stored
        # compressed, since loading never reads it).
        result = artifact.content
        graph = result.compiled_fw.result
        assert type(graph).__name__ == "CompiledFxGraph"
        assert "def call" in graph.source_code
        assert isinstance(graph._fx_graph_cache_debug_lines, list)
        assert all(isinstance(line, str) for line in graph._fx_graph_cache_debug_lines)
        assert isinstance(result.aot_forward_graph_str, str) and "class" in result.aot_forward_graph_str
        s = precompile.Store(str(store))
        _, backend = s.get_manifest(artifact.stored.digest)
        _, gmeta = s.get_manifest(backend["forward"])
        packed = Path(s.object_path(gmeta["fields"]["_fx_graph_cache_debug_lines"])).read_bytes()
        assert packed.startswith(b"\x00precompile-zlib\x00")
        source = Path(s.object_path(gmeta["fields"]["source_code"])).read_bytes()
        assert source.decode() == graph.source_code
        with pytest.raises(RuntimeError, match="No package found"):
            cache.read("0" * 64)
        loaded = cache.load_cache_entry(key)
        (bid,) = loaded.backends
        assert PrecompileContext.serialize_artifact_by_key(bid) is not None
        # The C++ kernel libraries are in place for Inductor's loader.
        assert list((tmp_path / "inductor").rglob("*.so"))
    PrecompileContext.clear()


def test_load_counts_hits_and_misses(compiled_store: tuple[Path, dict], tmp_path: Path, monkeypatch) -> None:
    store, _ = compiled_store
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    scenario = load_scenario("scenario_under_test")
    # The entry was compiled in a script run as `__main__`; loading checks
    # its sources against that module.
    monkeypatch.setitem(sys.modules, "__main__", scenario)
    counters.clear()
    with precompile.installed(store, save_on_exit=False) as cache:
        assert cache.load(scenario.MLP.forward) is not None
        assert cache.load(scenario._scale) is None
    assert counters["dynamo_cache"]["dynamo_cache_hit"] == 1
    assert counters["dynamo_cache"]["dynamo_cache_miss"] == 1
    PrecompileContext.clear()


def test_truncated_object_is_a_miss_with_a_warning(
    compiled_store: tuple[Path, dict], tmp_path: Path, monkeypatch
) -> None:
    store, a = compiled_store
    copy = tmp_path / "store"
    import shutil

    shutil.copytree(store, copy)
    s = precompile.Store(str(copy))
    (entry,) = a["report"]["entries"].values()
    _, meta = s.get_manifest(entry)
    victim = Path(s.object_path(meta["dynamo"]["record"]))
    victim.chmod(0o644)
    victim.write_bytes(victim.read_bytes()[:-7])
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    scenario = load_scenario("scenario_under_test")
    counters.clear()
    with (
        precompile.installed(copy, save_on_exit=False) as cache,
        pytest.warns(precompile.PrecompileWarning, match="could not be loaded"),
    ):
        assert cache.load(scenario.MLP.forward) is None
    assert counters["dynamo_cache"]["dynamo_cache_error"] == 1


def test_clear_forgets_entries(compiled_store: tuple[Path, dict], tmp_path: Path) -> None:
    import shutil

    store, _ = compiled_store
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    with precompile.installed(copy, save_on_exit=False) as cache:
        assert cache.store.refs("dynamo/")
        cache.clear()
        assert cache.store.refs("dynamo/") == []
