"""Hosts sharing one Redis remote, each a separate process with its own store.

Every host is a fresh process with its own local store, its own Inductor and
Triton cache dirs and a compiler spy on PATH (see `support/warm_start.py`); only
`PRECOMPILE_REMOTE` is shared. The remote is also killed in the middle of a
save and of a load, and has a damaged value: the hosts warn (or count),
compile what they cannot load, and give the same outputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from support.counters import counter
from support.redis_servers import kill_on_command
from support.warm_start import run_scenario

from precompile import Store
from precompile.remote import Remote, push, remote_usage

# Every host here signs its pushes with the fleet key and trusts it.
pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("signed_fleet")]


def test_install_takes_a_remote_url_or_the_environment(
    redis_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import precompile

    monkeypatch.delenv("PRECOMPILE_REMOTE", raising=False)
    try:
        cache = precompile.install(tmp_path / "s", remote=redis_server.url, save_on_exit=False)
        assert cache.store.remote.remote.url == redis_server.url
        monkeypatch.setenv("PRECOMPILE_REMOTE", redis_server.url + "?namespace=fleet")
        cache = precompile.install(tmp_path / "s", save_on_exit=False)
        assert cache.store.remote.remote.keys.base == "fleet:v2:"
        monkeypatch.delenv("PRECOMPILE_REMOTE")
        cache = precompile.install(tmp_path / "s", save_on_exit=False)
        assert getattr(cache.store, "remote", None) is None
        with pytest.raises(ValueError, match="scheme"):
            precompile.install(tmp_path / "s", remote="http://127.0.0.1:1", save_on_exit=False)
    finally:
        precompile.uninstall()


def _host(name: str, mode: str, root: Path, url: str) -> dict[str, Any]:
    """Run one host: its own store under `root`, sharing only the remote."""
    return run_scenario(
        "inference",
        mode,
        root / name / "store",
        root / name,
        extra_env={"PRECOMPILE_REMOTE": url},
    )


def _assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert len(a["outputs"]) == len(b["outputs"])
    for x, y in zip(a["outputs"], b["outputs"]):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


@pytest.fixture(scope="module")
def build_host(
    redis_factory: Any, tmp_path_factory: pytest.TempPathFactory, fleet_key: tuple[str, str]
) -> dict[str, Any]:
    """One host that compiled the scenario and saved it into its store and the remote."""
    server = redis_factory()
    root = tmp_path_factory.mktemp("fleet")
    # Module-scoped: set up before the tests' own `signed_fleet`.
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PRECOMPILE_SIGNING_KEY", fleet_key[0])
        env.setenv("PRECOMPILE_TRUSTED_KEYS", fleet_key[1])
        a = _host("build", "compile", root, server.url)
    assert a["compiler_runs"], "the build host compiles"
    assert counter(a, "precompile_remote", "refs_written") == 1, a["counters"]
    return {
        "result": a,
        "server": server,
        "root": root,
        "store": Store(str(root / "build" / "store")),
    }


def test_a_fresh_host_warm_starts_from_the_remote(build_host: dict[str, Any], tmp_path: Path) -> None:
    a = build_host["result"]
    b = _host("fresh", "load", tmp_path, build_host["server"].url)
    _assert_same(a, b)
    assert b["compiler_runs"] == [], b["compiler_runs"]
    assert counter(b, "dynamo_cache", "dynamo_cache_hit") == 1, b["counters"]
    assert counter(b, "inductor", "fxgraph_cache_miss") == 0
    assert counter(b, "aot_autograd", "autograd_cache_miss") == 0
    assert counter(b, "precompile_remote", "hits") == 1
    assert counter(b, "precompile_remote", "errors") == 0
    assert "PrecompileWarning" not in b["stderr"]
    # What it pulled is now local: the next process on this host needs no remote.
    local = Store(str(tmp_path / "fresh" / "store"))
    assert local.refs("dynamo/") == build_host["store"].refs("dynamo/")
    assert local.verify().ok
    pulled = counter(b, "precompile_remote", "bytes_read")
    assert 0 < pulled <= build_host["store"].usage().reachable_bytes


def _copy_of_the_remote(build_host: dict[str, Any], redis_factory: Any) -> Any:
    """A private server holding what the build host pushed (it is going to be damaged)."""
    server = redis_factory()
    push(build_host["store"], Remote(server.url))
    return server


@pytest.mark.slow
def test_the_remote_killed_in_the_middle_of_a_load(
    build_host: dict[str, Any], redis_factory: Any, tmp_path: Path
) -> None:
    server = _copy_of_the_remote(build_host, redis_factory)
    watcher = kill_on_command(server, b"obj:")
    b = _host("fresh", "load", tmp_path, server.url)
    watcher.join(5)
    assert server.proc.poll() is not None, "the remote was killed during the load"
    _assert_same(build_host["result"], b)
    assert "PrecompileWarning" in b["stderr"] and "local store only" in b["stderr"]
    assert counter(b, "precompile_remote", "errors") >= 1
    assert counter(b, "dynamo_cache", "dynamo_cache_miss") == 1
    assert b["compiler_runs"], "what could not be loaded compiles"


@pytest.mark.slow
def test_the_remote_killed_in_the_middle_of_a_save(redis_factory: Any, tmp_path: Path) -> None:
    server = redis_factory()
    watcher = kill_on_command(server, b"SET precompile:v2:obj:")
    a = _host("build", "compile", tmp_path, server.url)
    watcher.join(5)
    assert server.proc.poll() is not None, "the remote was killed during the save"
    assert "PrecompileWarning" in a["stderr"] and "during a push" in a["stderr"]
    assert counter(a, "precompile_remote", "refs_written") == 0
    # The local save is whole: a second process on this host loads it.
    local = Store(str(tmp_path / "build" / "store"))
    assert local.refs("dynamo/") and local.verify().ok
    b = run_scenario("inference", "load", tmp_path / "build" / "store", tmp_path / "again")
    _assert_same(a, b)
    assert b["compiler_runs"] == []


@pytest.mark.slow
def test_a_damaged_remote_value_is_counted_and_compiled_around(
    build_host: dict[str, Any], redis_factory: Any, tmp_path: Path
) -> None:
    server = _copy_of_the_remote(build_host, redis_factory)
    store = build_host["store"]
    (ref,) = store.refs("dynamo/")
    entry = store.get_manifest(store.get_ref(ref))[1]
    backend = next(iter(entry["backends"].values()))["manifest"]
    forward = store.get_manifest(backend)[1]["forward"]
    victim = store.get_manifest(forward)[1]["fields"]["source_code"]
    remote = Remote(server.url)
    client = server.client()
    key = remote.keys.obj(victim)
    value = client.get(key)
    client.set(key, value[:-1] + bytes([value[-1] ^ 1]))

    b = _host("fresh", "load", tmp_path, server.url)
    _assert_same(build_host["result"], b)
    assert counter(b, "precompile_remote", "corrupt") == 1
    assert counter(b, "precompile_remote", "errors") == 0
    assert counter(b, "dynamo_cache", "dynamo_cache_miss") == 1
    assert b["compiler_runs"], "the damaged entry was not used"
    # The damaged object left the remote's index, so the next push of the
    # entry uploads it again and the remote is whole once more.
    assert push(store, remote).objects == 1
    usage = remote_usage(remote)
    assert usage["missing"] == [] and usage["entries"] == 1
    assert client.get(key) == value


@pytest.mark.slow
def test_a_stopped_remote_times_out_and_the_host_compiles(
    build_host: dict[str, Any], redis_factory: Any, tmp_path: Path
) -> None:
    server = _copy_of_the_remote(build_host, redis_factory)
    server.stop()  # SIGSTOP: connections are accepted and nothing answers
    try:
        b = _host("fresh", "load", tmp_path, server.url + "?timeout=0.5")
    finally:
        server.cont()
    _assert_same(build_host["result"], b)
    assert "PrecompileWarning" in b["stderr"] and "Timeout" in b["stderr"]
    assert counter(b, "precompile_remote", "errors") == 1  # then out of use: no second wait
    assert counter(b, "dynamo_cache", "dynamo_cache_miss") == 1
    assert b["compiler_runs"], "what could not be loaded compiles"
