"""A fleet of two torch versions sharing one local store dir and one Redis remote.

Hosts run this interpreter's torch and another's (`$PRECOMPILE_OTHER_TORCH_PYTHON`,
which `.ci/run` points at its torch 2.11 venv). Entries are filed by the
environment that can load them (`dynamo/<env-id>/<key>`), so the two versions'
entries for the same function live side by side, locally and on the remote,
and a fresh host of either version warm-starts from them with nothing compiled.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.counters import counter

import precompile
from precompile import Store

pytestmark = [pytest.mark.torch, pytest.mark.slow]

PROGRAM = Path(__file__).resolve().parent / "programs" / "fleet_host.py"
OTHER_ENV = "PRECOMPILE_OTHER_TORCH_PYTHON"


def _other_python() -> str:
    other = os.environ.get(OTHER_ENV, "")
    if not other or not os.access(other, os.X_OK):
        pytest.skip(f"${OTHER_ENV} names no second torch's Python (.ci/run sets it to its torch 2.11 venv)")
    probe = [other, "-c", "import torch; print(torch.__version__)"]
    version = subprocess.run(probe, capture_output=True, text=True, timeout=300).stdout.strip()
    if not version:
        pytest.skip(f"${OTHER_ENV}={other} does not import torch")
    if version == torch_version():
        pytest.skip(f"${OTHER_ENV} runs the same torch {version}: not a mixed fleet")
    return other


def torch_version() -> str:
    import torch

    return str(torch.__version__)


def _pythonpath(env: dict[str, str]) -> None:
    # Where precompile runs from a source tree (`python/`), both interpreters
    # import that one; an installed precompile's site-packages is never
    # shared: it holds this interpreter's torch.
    root = Path(precompile.__file__).resolve().parents[1]
    if not (root / "torch").exists():
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)


def host(python: str, store: Path, remote: str | None, work: Path, key: tuple[str, str]) -> dict[str, Any]:
    """One fresh host process: its own Inductor and Triton caches under `work`;
    it signs what it pushes with the fleet key `key` and trusts that key."""
    work.mkdir(parents=True)
    env = dict(os.environ)
    env.update(
        TORCHINDUCTOR_CACHE_DIR=str(work / "inductor"),
        TRITON_CACHE_DIR=str(work / "triton"),
        PYTHONWARNINGS="default",
        PRECOMPILE_SIGNING_KEY=key[0],
        PRECOMPILE_TRUSTED_KEYS=key[1],
    )
    env.pop("PRECOMPILE_ALLOW_UNSIGNED", None)
    env.pop("PRECOMPILE_REMOTE", None)
    _pythonpath(env)
    out = work / "result.json"
    proc = subprocess.run(
        [python, str(PROGRAM), str(store), remote or "-", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    result: dict[str, Any] = json.loads(out.read_text())
    result["stderr"] = proc.stderr
    return result


def _compiled_nothing(r: dict[str, Any]) -> None:
    assert counter(r, "dynamo_cache", "dynamo_cache_hit") == 1, r["stderr"][-3000:]
    assert counter(r, "dynamo_cache", "dynamo_cache_error") == 0, r["stderr"][-3000:]
    assert counter(r, "inductor", "fxgraph_cache_miss") == 0, r["counters"]
    assert counter(r, "aot_autograd", "autograd_cache_miss") == 0, r["counters"]
    assert counter(r, "precompile", "frames_loaded") == 1, r["counters"]


@pytest.fixture(scope="module")
def fleet(redis_factory: Any, tmp_path_factory: pytest.TempPathFactory, fleet_key: tuple[str, str]) -> dict[str, Any]:
    """Each version compiled once into one shared store dir, pushing to one remote."""
    pythons = {"this": sys.executable, "other": _other_python()}
    server = redis_factory()
    root = tmp_path_factory.mktemp("mixed-fleet")
    shared = root / "shared-store"
    built = {name: host(py, shared, server.url, root / f"build-{name}", fleet_key) for name, py in pythons.items()}
    return {"pythons": pythons, "server": server, "root": root, "shared": shared, "built": built, "key": fleet_key}


def test_both_versions_file_the_same_function_under_their_own_environment(fleet: dict[str, Any]) -> None:
    this, other = fleet["built"]["this"], fleet["built"]["other"]
    # The same function: the same key in both versions. Before entries were
    # filed by environment, the second save replaced the first.
    assert this["key"] == other["key"]
    assert this["ref"] != other["ref"]
    assert list(this["saved"].values()) == [this["ref"]] and list(other["saved"].values()) == [other["ref"]]
    # The second host found only the first's entry: a miss naming the factor.
    assert counter(other, "precompile", "miss_env_mismatch") == 1, other["counters"]
    assert f"torch {this['torch']} stored, {other['torch']} here" in other["stderr"]


def test_a_store_dir_shared_by_two_torch_versions_keeps_both_entries(fleet: dict[str, Any], tmp_path: Path) -> None:
    built = fleet["built"]
    shared = Store(str(fleet["shared"]))
    refs = {name: shared.get_ref(r["ref"]) for name, r in built.items()}
    assert sorted(shared.refs("dynamo/")) == sorted(r["ref"] for r in built.values())
    for name, python in fleet["pythons"].items():
        # A fresh host (fresh Inductor cache) on a copy of the shared store.
        store = tmp_path / f"{name}-store"
        shutil.copytree(fleet["shared"], store)
        r = host(python, store, None, tmp_path / name, fleet["key"])
        _compiled_nothing(r)
        assert r["output"] == built[name]["output"]
    assert {name: shared.get_ref(r["ref"]) for name, r in built.items()} == refs


def test_fresh_hosts_of_each_version_warm_start_from_one_remote(fleet: dict[str, Any], tmp_path: Path) -> None:
    from precompile.remote import Remote

    built = fleet["built"]
    remote = Remote(fleet["server"].url)
    before = remote.ref_digests([r["ref"] for r in built.values()])
    assert all(before.values()) and len(set(before.values())) == 2
    for name, python in fleet["pythons"].items():
        r = host(python, tmp_path / f"{name}-store", fleet["server"].url, tmp_path / name, fleet["key"])
        _compiled_nothing(r)
        assert r["output"] == built[name]["output"]
        assert counter(r, "precompile", "miss_env_mismatch") == 0
    # Neither host replaced the other version's entry.
    assert remote.ref_digests([r["ref"] for r in built.values()]) == before
