"""Switching the store off by environment: `PRECOMPILE_DISABLE=1`, and torch's
own `TORCHINDUCTOR_FORCE_DISABLE_CACHES=1`: nothing loads, nothing is saved;
and, switched on, what real processes loaded and saved adds up in `stats`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
from support.counters import counter
from support.processes import run_precompile
from support.warm_start import run_scenario

from precompile import Store
from precompile.entries import REF_PREFIX

pytestmark = pytest.mark.torch


@pytest.mark.parametrize(
    "env", [{"PRECOMPILE_DISABLE": "1"}, {"TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}], ids=lambda e: next(iter(e))
)
def test_switched_off_by_environment_nothing_loads(
    compiled_store: tuple[Path, dict], tmp_path: Path, env: dict[str, str]
) -> None:
    store, _ = compiled_store
    b = run_scenario("inference", "load", store, tmp_path, extra_env=env)
    assert counter(b, "dynamo_cache", "dynamo_cache_hit") == 0, b["counters"]
    assert counter(b, "precompile", "frames_loaded") == 0, b["counters"]
    assert counter(b, "precompile", "disabled_loads") >= 1, b["counters"]


def test_switched_off_nothing_is_saved(tmp_path: Path) -> None:
    a = run_scenario("inference", "compile", tmp_path / "store", tmp_path, extra_env={"PRECOMPILE_DISABLE": "1"})
    assert a["report"]["entries"] == {}
    assert not (tmp_path / "store").exists() or not Store(str(tmp_path / "store")).refs(REF_PREFIX)


def test_loads_and_saves_of_real_processes_add_up_in_stats(compiled_store: tuple[Path, dict], tmp_path: Path) -> None:
    store, a = compiled_store
    before = json.loads(run_precompile("--store", store, "stats", "--json").stdout)
    b = run_scenario("inference", "load", store, tmp_path)
    assert counter(b, "precompile", "entries_loaded") >= 1, b["counters"]
    after = json.loads(run_precompile("--store", store, "stats", "--json").stdout)
    # The compiling process saved (and missed, with nothing stored yet); the
    # loading one, which never calls save(), counted its hits at exit.
    assert after["saves"] >= len(a["report"]["entries"]) >= 1
    assert after["misses_by_reason"].get("not_stored", 0) >= 1
    assert after["hits"] - before["hits"] == counter(b, "precompile", "entries_loaded")
