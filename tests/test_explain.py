"""A miss says why: each reason reaches the counters, the record file and `precompile explain`.

The entries are real: one compiled in a subprocess, read back from the store,
and (for the reasons a healthy store cannot produce on this torch) copied
with the one part broken that the reason is about.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
from support.counters import counter
from support.warm_start import load_scenario, run_scenario

import precompile
from precompile import cli
from precompile.miss_log import read_records

torch = pytest.importorskip("torch")
from torch._dynamo.precompile_context import PrecompileContext  # noqa: E402 (after the skip)
from torch._dynamo.utils import counters  # noqa: E402

from precompile import restore  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture
def scenario(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    module = load_scenario("scenario_explained")
    # The entry was compiled in a script run as `__main__`: its guards name
    # `__main__.MLP` and its sources are checked against `__main__`.
    monkeypatch.setitem(sys.modules, "__main__", module)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    counters.clear()
    yield module
    PrecompileContext.clear()
    torch._dynamo.reset()


def _explain(store: Path, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert cli.main(["--store", str(store), "explain"]) == 0
    return capsys.readouterr().out


def _copy(store: Path, tmp_path: Path) -> Path:
    import shutil

    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    return copy


def _broken(entry, **changes):
    """A copy of `entry` whose main code has `changes` (torch's object untouched)."""
    main = dataclasses.replace(entry.dynamo.codes[0], **changes)
    dynamo = dataclasses.replace(entry.dynamo, codes=[main, *entry.dynamo.codes[1:]])
    return type(entry)(dynamo=dynamo, backends=entry.backends)


def _guarded(entry, **changes):
    code = entry.dynamo.codes[0]
    guarded = [dataclasses.replace(g, **changes) for g in code.guarded_codes]
    return _broken(entry, guarded_codes=guarded)


def _sources(entry, **changes):
    info = entry.dynamo.source_info
    sources = {dataclasses.replace(s, **changes) for s in info.inlined_sources}
    dynamo = dataclasses.replace(entry.dynamo, source_info=dataclasses.replace(info, inlined_sources=sources))
    return type(entry)(dynamo=dynamo, backends=entry.backends)


BREAKS = {
    "source_changed": lambda e: _sources(e, checksum="0" * 64),
    "guards_unreadable": lambda e: _guarded(e, guards_state=b"\x80\x04not a guard state"),
    "module_missing": lambda e: _sources(e, module="precompile_no_such_module"),
    "missing_backend": lambda e: type(e)(dynamo=e.dynamo, backends={}),
    "unresolved_global": lambda e: _guarded(
        e,
        dynamo_code=dataclasses.replace(
            e.dynamo.codes[0].guarded_codes[0].dynamo_code,
            co_names=(
                *e.dynamo.codes[0].guarded_codes[0].dynamo_code.co_names,
                "___module_gone_1_c0",
            ),
        ),
    ),
}


@pytest.mark.parametrize("reason", sorted(BREAKS))
def test_an_entry_that_does_not_restore_is_a_named_miss(
    reason: str, compiled_store, scenario, tmp_path: Path, capsys
) -> None:
    store = _copy(compiled_store[0], tmp_path)
    (key,) = compiled_store[1]["report"]["entries"]
    with precompile.installed(store, save_on_exit=False) as cache:
        entry = cache.read(key)
        assert restore.prepare(scenario.MLP.forward, key, entry) is not None
        with pytest.warns(precompile.PrecompileWarning, match=reason):
            assert restore.prepare(scenario.MLP.forward, key, BREAKS[reason](entry)) is None
    assert counters["precompile"][f"miss_{reason}"] == 1
    (miss,) = [r for r in read_records(str(store)) if r["event"] == "miss"]
    assert miss["reason"] == reason and miss["key"] == key
    assert "MLP.forward" in miss["detail"]
    text = _explain(store, capsys)
    assert f"MISS    {reason}: MLP.forward" in text


def test_a_bypassed_code_is_a_named_miss(compiled_store, scenario, tmp_path: Path, capsys) -> None:
    # torch marks a code bypassed when it could not save its guards: the
    # entry still loads (its other codes serve), and the code is a miss.
    store = _copy(compiled_store[0], tmp_path)
    (key,) = compiled_store[1]["report"]["entries"]
    with precompile.installed(store, save_on_exit=False) as cache:
        bypassed = _broken(cache.read(key), bypassed=True, guarded_codes=[])
        with pytest.warns(precompile.PrecompileWarning, match="bypassed"):
            assert restore.prepare(scenario.MLP.forward, key, bypassed) is not None
    assert counters["precompile"]["miss_bypassed"] == 1
    (miss,) = [r for r in read_records(str(store)) if r["event"] == "miss"]
    assert miss["reason"] == "bypassed" and "MLP.forward" in miss["detail"]
    assert "MISS    bypassed: MLP.forward" in _explain(store, capsys)


def test_a_corrupt_entry_is_a_named_miss(compiled_store, scenario, tmp_path: Path, capsys) -> None:
    store = _copy(compiled_store[0], tmp_path)
    s = precompile.Store(str(store))
    (digest,) = compiled_store[1]["report"]["entries"].values()
    _, meta = s.get_manifest(digest)
    victim = Path(s.object_path(meta["dynamo"]["record"]))
    victim.chmod(0o644)
    victim.write_bytes(victim.read_bytes()[:-7])
    with (
        precompile.installed(store, save_on_exit=False) as cache,
        pytest.warns(precompile.PrecompileWarning, match="load_error"),
    ):
        assert cache.load(scenario.MLP.forward) is None
    assert counters["precompile"]["miss_load_error"] == 1
    assert "MISS    load_error: MLP.forward" in _explain(store, capsys)


def test_a_function_never_stored_is_logged_without_a_warning(compiled_store, scenario, tmp_path: Path, capsys) -> None:
    store = _copy(compiled_store[0], tmp_path)
    with precompile.installed(store, save_on_exit=False) as cache:
        assert cache.load(scenario._scale) is None  # filterwarnings=error: no warning
    assert counters["precompile"]["miss_not_stored"] == 1
    assert "MISS    not_stored: _scale" in _explain(store, capsys)


def test_rejected_guards_are_named_with_their_values(
    compiled_store, scenario, tmp_path: Path, capsys, monkeypatch
) -> None:
    store = _copy(compiled_store[0], tmp_path)
    torch._dynamo.reset()
    with precompile.installed(store, save_on_exit=False):
        fn = torch.compile(scenario.MLP())
        with (
            torch.no_grad(),
            pytest.warns(precompile.PrecompileWarning, match="guard_failed"),
        ):
            fn(torch.randn(7, 16))  # stored for a batch of 4
    assert counters["precompile"]["frames_loaded"] == 1
    assert counters["precompile"]["frames_recompiled"] == 1
    records = read_records(str(store))
    assert [r["event"] for r in records] == ["run", "loaded", "miss"]
    miss = records[-1]
    assert miss["reason"] == "guard_failed"
    assert any("expected 4, actual 7" in g for g in miss["guards"]), miss["guards"]
    text = _explain(store, capsys)
    assert "MISS    guard_failed: forward" in text and "expected 4, actual 7" in text
    capsys.readouterr()
    assert cli.main(["--store", str(store), "explain", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[-1]["reason"] == "guard_failed"


def test_a_fresh_process_that_loads_everything_records_no_miss(compiled_store, tmp_path: Path, capsys) -> None:
    store = _copy(compiled_store[0], tmp_path)
    b = run_scenario("inference", "load", store, tmp_path)
    assert counter(b, "precompile", "frames_loaded") == 1
    assert not [k for k in b["counters"].get("precompile", {}) if k.startswith("miss_")]
    assert "PrecompileWarning" not in b["stderr"]
    assert "misses: none" in _explain(store, capsys)


def test_explain_without_records_is_a_usage_error(tmp_path: Path) -> None:
    precompile.Store(str(tmp_path / "empty"), create=True)
    assert cli.main(["--store", str(tmp_path / "empty"), "explain"]) == 2


def test_log_lines_name_the_function_and_where_it_is(compiled_store, scenario, tmp_path: Path, caplog) -> None:
    import logging

    from precompile import explain

    store = _copy(compiled_store[0], tmp_path)
    (key,) = compiled_store[1]["report"]["entries"]
    with precompile.installed(store, save_on_exit=False) as cache, caplog.at_level(logging.INFO, logger="precompile"):
        explain.loaded(key, cache.read(key), fn=scenario.MLP.forward)
    [line] = [r.getMessage() for r in caplog.records if "compiled variant(s)" in r.getMessage()]
    # The function, its file and line, then the key that names the entry.
    assert "for MLP.forward" in line and " at " in line and "scenario.py:" in line and f"(key {key[:16]})" in line


def _refile(store: Path, key: str, digest: str, **env_changes: str) -> str:
    """The entry `digest` refiled as if saved in an environment with
    `env_changes`, under that environment's ref; this host's ref removed.
    Returns the new ref name."""
    from precompile.entries import parse_ref
    from precompile.environment import Environment

    s = precompile.Store(str(store))
    children, meta = s.get_manifest(digest)
    env = dataclasses.replace(Environment.from_json(meta["env"]), **env_changes)
    for name in s.refs("dynamo/"):
        if parse_ref(name) == (Environment.from_json(meta["env"]).id, key):
            s.delete_ref(name)
    name = f"dynamo/{env.id}/{key}"
    s.set_ref(name, s.put_manifest(children, {**meta, "env": env.to_json()}))
    return name


def test_entries_of_other_environments_name_what_differs(compiled_store, scenario, tmp_path: Path, capsys) -> None:
    store = _copy(compiled_store[0], tmp_path)
    ((key, digest),) = compiled_store[1]["report"]["entries"].items()
    _refile(store, key, digest, torch="2.11.0+cu128", torch_git="0123456789abcdef0123456789abcdef01234567")
    with (
        precompile.installed(store, save_on_exit=False) as cache,
        pytest.warns(precompile.PrecompileWarning, match="env_mismatch"),
    ):
        assert cache.load(scenario.MLP.forward) is None
    assert counters["precompile"]["miss_env_mismatch"] == 1
    assert counters["dynamo_cache"]["dynamo_cache_miss"] == 1
    (miss,) = [r for r in read_records(str(store)) if r["event"] == "miss"]
    assert miss["reason"] == "env_mismatch" and miss["factors"] == ["torch", "torch_git"]
    assert f"torch 2.11.0+cu128 stored, {torch.__version__} here" in miss["detail"]
    assert "torch build 0123456789ab stored" in miss["detail"]
    text = _explain(store, capsys)
    assert "MISS    env_mismatch: MLP.forward" in text and "torch 2.11.0+cu128 stored" in text


def test_an_entry_under_its_unnamespaced_ref_is_never_loaded(compiled_store, scenario, tmp_path: Path, capsys) -> None:
    # `dynamo/<key>` carries no environment: it might hold another torch's
    # entry, so even one that would load here is not loaded.
    store = _copy(compiled_store[0], tmp_path)
    ((key, digest),) = compiled_store[1]["report"]["entries"].items()
    s = precompile.Store(str(store))
    (own,) = s.refs("dynamo/")
    s.delete_ref(own)
    s.set_ref(f"dynamo/{key}", digest)
    with (
        precompile.installed(store, save_on_exit=False) as cache,
        pytest.warns(precompile.PrecompileWarning, match="env_mismatch"),
    ):
        assert cache.load(scenario.MLP.forward) is None
    (miss,) = [r for r in read_records(str(store)) if r["event"] == "miss"]
    assert miss["factors"] == ["environment"] and "never loaded" in miss["detail"]


def _wrong_typed(store: Path, part: str) -> None:
    """The stored entry with its Dynamo pickle (or its backend's) replaced by a
    valid pickle of another type: every blob verifies, the manifest is valid."""
    from precompile.results import put_pickled
    from precompile.schema import BackendUse, EntryMeta, PickledArtifactMeta

    s = precompile.Store(str(store))
    (name,) = s.refs("dynamo/")
    meta = EntryMeta.from_json(s.get_manifest(s.get_ref(name))[1])
    if part == "dynamo":
        meta = dataclasses.replace(meta, dynamo=put_pickled(s, {"codes": [], "device_type": "cpu"}))
    else:
        held = PickledArtifactMeta(put_pickled(s, {"not": "a backend"}))
        manifest = s.put_manifest(sorted(set(held.children())), held.to_json())
        meta = dataclasses.replace(meta, backends={bid: BackendUse(manifest, None) for bid in meta.backends})
    s.set_ref(name, s.put_manifest(sorted(set(meta.children())), meta.to_json()))


@pytest.mark.parametrize("part", ["dynamo", "backend"])
def test_an_entry_that_unpickles_to_another_type_is_a_load_error(
    part: str, compiled_store, tmp_path: Path, capsys
) -> None:
    """`torch.compile(f)(x)` in a fresh process: the wrong type is a miss with
    a warning and `dynamo_cache_error`, never an error in the call."""
    store = _copy(compiled_store[0], tmp_path)
    _wrong_typed(store, part)
    b = run_scenario("inference", "load", store, tmp_path)
    assert counter(b, "dynamo_cache", "dynamo_cache_error") == 1, b["stderr"][-3000:]
    assert counter(b, "precompile", "miss_load_error") == 1
    assert counter(b, "precompile", "frames_loaded") == 0
    assert "PrecompileWarning" in b["stderr"] and "not a" in b["stderr"]
    for x, y in zip(compiled_store[1]["outputs"], b["outputs"]):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    assert "MISS    load_error: MLP.forward" in _explain(store, capsys)


# -- misses that name which factor of the key differs --------------------------------

KEYED = Path(__file__).resolve().parent / "programs" / "keyed_function.py"
MODULE = "import torch\n\n\ndef f(x):\n    return torch.sin(x) + 1\n"
# The same function two lines further down: lines above it were added.
MOVED_DOWN = MODULE.replace("\n\ndef f", "\n\n\n\ndef f")
EDITED = MODULE.replace("+ 1", "+ 2")


def _run_keyed(store: Path, module_dir: Path, work: Path) -> dict:
    import os
    import subprocess

    work.mkdir(parents=True, exist_ok=True)
    out = work / "result.json"
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(work / "inductor"), "PYTHONWARNINGS": "default"}
    proc = subprocess.run(
        [sys.executable, str(KEYED), str(store), str(module_dir), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    result = json.loads(out.read_text())
    result["stderr"] = proc.stderr
    return result


@pytest.fixture(scope="module")
def keyed_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A store that a first run of `kmodel.f`, checked out at `<work>/a`, filled."""
    work = tmp_path_factory.mktemp("keyed")
    (work / "a").mkdir()
    (work / "a" / "kmodel.py").write_text(MODULE)
    result = _run_keyed(work / "store", work / "a", work / "first")
    return work / "store", result


def _checkout(tmp_path: Path, name: str, text: str) -> Path:
    directory = tmp_path / name
    directory.mkdir()
    (directory / "kmodel.py").write_text(text)
    return directory


@pytest.fixture
def kmodel_at(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Imports `kmodel` from a checkout made with `text`, as a process run from there would."""
    import importlib.util

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    counters.clear()

    def load(name: str, text: str):
        path = _checkout(tmp_path, name, text) / "kmodel.py"
        spec = importlib.util.spec_from_file_location("kmodel", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, "kmodel", module)
        spec.loader.exec_module(module)
        return module

    yield load
    PrecompileContext.clear()
    torch._dynamo.reset()


def _only_miss(store: Path) -> dict:
    (miss,) = [r for r in read_records(str(store)) if r["event"] == "miss"]
    return miss


def test_a_first_run_is_not_stored_and_quiet(keyed_store) -> None:
    first = keyed_store[1]
    assert counter(first, "precompile", "miss_not_stored") == 1
    assert counter(first, "precompile", "frames_invalidated") == 0
    assert "PrecompileWarning" not in first["stderr"]


def test_a_moved_checkout_of_the_same_source_loads(keyed_store, kmodel_at, tmp_path: Path) -> None:
    # torch keys a function by qualified name and first line, and checks its
    # source by module and lines: another directory holding the same file is
    # served.
    store = _copy(keyed_store[0], tmp_path)
    kmodel = kmodel_at("moved", MODULE)
    with precompile.installed(store, save_on_exit=False) as cache:
        assert cache.load(kmodel.f) is not None
    assert counters["precompile"]["frames_loaded"] == 1
    assert not [k for k in counters["precompile"] if k.startswith("miss_")]


def test_lines_added_above_in_a_moved_checkout_name_line_and_file(
    keyed_store, kmodel_at, tmp_path: Path, capsys
) -> None:
    store = _copy(keyed_store[0], tmp_path)
    kmodel = kmodel_at("moved", MOVED_DOWN)
    with (
        precompile.installed(store, save_on_exit=False) as cache,
        pytest.warns(precompile.PrecompileWarning, match="key_mismatch"),
    ):
        assert cache.load(kmodel.f) is None
    miss = _only_miss(store)
    assert miss["reason"] == "key_mismatch" and miss["factors"] == ["line", "file"]
    assert "defined at line 4 when stored, line 6 here" in miss["detail"]
    assert (
        f"{keyed_store[0].parent / 'a' / 'kmodel.py'} stored, {tmp_path / 'moved' / 'kmodel.py'} here"
        in (miss["detail"])
    )
    assert "other source" not in miss["detail"]
    assert counters["precompile"]["frames_invalidated"] == 1
    text = _explain(store, capsys)
    assert "MISS    key_mismatch: f" in text
    # The path is no part of the key: the compile is lost to the lines above.
    assert "1 frame compiled that the store held for another line of its file" in text


def test_an_edited_function_names_its_source_in_a_fresh_process(keyed_store, tmp_path: Path, capsys) -> None:
    # Edited and moved down: another key, so before the key's parts were
    # recorded this read `not_stored`, as on a first run.
    store = _copy(keyed_store[0], tmp_path)
    checkout = _checkout(tmp_path, "a", EDITED.replace("\n\ndef f", "\n\n\ndef f"))
    b = _run_keyed(store, checkout, tmp_path / "second")
    assert counter(b, "precompile", "miss_key_mismatch") == 1, b["counters"]
    assert counter(b, "precompile", "frames_invalidated") == 1
    assert "precompile miss (key_mismatch) for f" in b["stderr"]
    assert "stored entry compiled from other source" in b["stderr"]
    miss = _only_miss(store)
    assert miss["factors"] == ["source", "line", "file"]  # this checkout is another directory too
    text = _explain(store, capsys)
    assert "1 frame compiled that the store held for other source" in text
    capsys.readouterr()
    assert cli.main(["--store", str(store), "stats", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["frames_invalidated"] == 1 and stats["invalidated_by_factor"] == {"source": 1}
    assert stats["misses_by_reason"]["key_mismatch"] == 1
    assert cli.main(["--store", str(store), "stats"]) == 0
    assert "1 frame compiled that the store held for other source" in capsys.readouterr().out


def test_an_edit_that_keeps_the_key_counts_as_a_compile_lost_to_source(
    keyed_store, kmodel_at, tmp_path: Path, capsys
) -> None:
    store = _copy(keyed_store[0], tmp_path)
    kmodel = kmodel_at("a", EDITED)
    with (
        precompile.installed(store, save_on_exit=False) as cache,
        pytest.warns(precompile.PrecompileWarning, match="source_changed"),
    ):
        assert cache.load(kmodel.f) is None
    assert _only_miss(store)["factors"] == ["source"]
    assert counters["precompile"]["frames_invalidated"] == 1
    assert "1 frame compiled that the store held for other source" in _explain(store, capsys)


def test_an_entry_of_another_torch_build_counts_as_a_compile_lost_to_it(
    compiled_store, scenario, tmp_path: Path, capsys
) -> None:
    store = _copy(compiled_store[0], tmp_path)
    ((key, digest),) = compiled_store[1]["report"]["entries"].items()
    _refile(store, key, digest, torch_git="0123456789abcdef0123456789abcdef01234567")
    with (
        precompile.installed(store, save_on_exit=False) as cache,
        pytest.warns(precompile.PrecompileWarning, match="env_mismatch"),
    ):
        assert cache.load(scenario.MLP.forward) is None
    assert _only_miss(store)["factors"] == ["torch_git"]
    assert counters["precompile"]["frames_invalidated"] == 1
    assert "1 frame compiled that the store held for another torch build of its version" in _explain(store, capsys)


def test_an_index_whose_entry_is_gone_is_not_a_candidate(keyed_store, kmodel_at, tmp_path: Path) -> None:
    # The index outlives a deleted entry (`clear`, eviction): a miss then
    # says `not_stored`, never naming an entry that is not there.
    store = _copy(keyed_store[0], tmp_path)
    s = precompile.Store(str(store))
    for name in s.refs("dynamo/"):
        s.delete_ref(name)
    kmodel = kmodel_at("a", MOVED_DOWN)
    with precompile.installed(store, save_on_exit=False) as cache:
        assert cache.load(kmodel.f) is None  # filterwarnings=error: no warning
    assert _only_miss(store)["reason"] == "not_stored"


def test_a_config_change_alone_is_served(compiled_store, scenario, tmp_path: Path) -> None:
    # Inductor and Dynamo config are part of neither torch's key nor the
    # environment: the entry compiled under the defaults is served, no miss.
    store = _copy(compiled_store[0], tmp_path)
    with (
        torch._inductor.config.patch(max_autotune=True, freezing=True),
        precompile.installed(store, save_on_exit=False) as cache,
    ):
        assert cache.load(scenario.MLP.forward) is not None
    assert not [k for k in counters["precompile"] if k.startswith("miss_")]
