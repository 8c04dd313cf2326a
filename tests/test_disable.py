"""Switching the store off by environment: `PRECOMPILE_DISABLE=1`, and torch's
own `TORCHINDUCTOR_FORCE_DISABLE_CACHES=1`: nothing loads, nothing is saved."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
from support.counters import counter
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
