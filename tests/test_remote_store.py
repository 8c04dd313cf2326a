"""The Redis remote at the store level, against real redis-servers.

Entries are synthetic (see `support/synthetic.py`): push and pull, chunking, dedup,
damaged values, a remote that is down, killed or stopped, eight concurrent
pushers, gc under a grace period, and a 3-node cluster.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from support.processes import PACKAGE_ROOT, run_precompile
from support.redis_servers import free_port, kill_on_command
from support.synthetic import blob_bytes, load_entry, make_entries

from precompile import (
    MissingObjectError,
    PrecompileWarning,
    Store,
    StoreError,
)
from precompile.remote import Remote, RemoteError, RemoteLayer, pull, push, remote_gc, remote_usage

# Every host here signs its pushes with the fleet key and trusts it.
pytestmark = pytest.mark.usefixtures("signed_fleet")


def _store(tmp_path: Path, name: str) -> Store:
    return Store(str(tmp_path / name))


def test_push_then_pull_gives_the_same_entries(redis_server: Any, tmp_path: Path) -> None:
    src = _store(tmp_path, "a")
    refs = make_entries(src, 3)
    remote = Remote(redis_server.url)
    first = push(src, remote)
    assert first.refs == 3 and first.objects > 0 and first.objects_present == 0
    assert first.bytes == src.usage().reachable_bytes

    dst = _store(tmp_path, "b")
    got = pull(dst, remote)
    assert got.refs == 3 and got.bytes == first.bytes
    assert dst.verify().ok
    for name, digest in refs.items():
        assert dst.get_ref(name) == digest
        assert load_entry(dst, name) == load_entry(src, name)
    assert remote.stats()["corrupt"] == 0


def test_a_push_sends_only_what_the_remote_lacks(redis_server: Any, tmp_path: Path) -> None:
    src = _store(tmp_path, "a")
    refs = make_entries(src, 2)
    remote = Remote(redis_server.url)
    push(src, remote)
    again = push(src, remote)
    assert (again.objects, again.bytes) == (0, 0)

    # A second model reusing the first one's backends adds only its new blob
    # and its own entry manifest.
    backends = src.get_manifest(refs["dynamo/e0"])[0]
    fresh = src.put(blob_bytes("only-in-model-2", 123_456))
    entry = src.put_manifest([*backends, fresh], {"kind": "entry", "key": "m2"})
    src.set_ref("dynamo/m2", entry)
    second = push(src, remote, ["dynamo/m2"])
    assert second.objects == 2
    assert second.bytes == 123_456 + os.path.getsize(src.object_path(entry))
    assert remote_usage(remote)["dedup_ratio"] > 1.5


def test_a_large_blob_travels_in_chunks(redis_server: Any, tmp_path: Path) -> None:
    src = _store(tmp_path, "a")
    big = src.put(blob_bytes("big", 50_000))
    entry = src.put_manifest([big], {"kind": "entry"})
    src.set_ref("dynamo/big", entry)
    remote = Remote(redis_server.url + "?chunk_size=4096")
    push(src, remote)
    client = redis_server.client()
    assert client.exists(remote.keys.obj(big)) == 0
    assert client.exists(*(remote.keys.chunk(big, i) for i in range(13))) == 13
    assert client.hget(remote.keys.meta(big), "c") == b"13"
    dst = _store(tmp_path, "b")
    pull(dst, remote)
    assert bytes(dst.get(big)) == blob_bytes("big", 50_000)


def _leaf(store: Store, ref: str) -> str:
    backend = store.get_manifest(store.get_ref(ref))[0][0]
    return str(store.get_manifest(backend)[0][0])


@pytest.mark.parametrize("damage", ["other-bytes", "truncated", "lost-chunk"])
def test_a_damaged_value_is_counted_and_never_used(redis_server: Any, tmp_path: Path, damage: str) -> None:
    src = _store(tmp_path, "a")
    make_entries(src, 1)
    remote = Remote(redis_server.url + "?chunk_size=1000")
    push(src, remote)
    victim = _leaf(src, "dynamo/e0")
    size = len(bytes(src.get(victim)))
    client = redis_server.client()
    key = remote.keys.obj(victim) if size <= 1000 else remote.keys.chunk(victim, 0)
    value = client.get(key)
    if damage == "other-bytes":
        client.set(key, bytes(b ^ 0x5A for b in value))
    elif damage == "truncated":
        client.set(key, value[: len(value) // 2])
    else:
        client.delete(key)

    dst = _store(tmp_path, "b")
    layer = RemoteLayer(Remote(redis_server.url + "?chunk_size=1000"), dst)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # damage is a miss, not an outage
        assert layer.get_ref("dynamo/e0") is None
    stats = layer.stats()
    assert stats["corrupt"] == 1 and stats["misses"] == 1
    assert dst.get_ref("dynamo/e0") is None and not dst.contains(victim)
    assert dst.verify().ok
    # Counted once, and dropped from the index: a pull now finds it missing.
    assert list(pull(_store(tmp_path, "c"), remote).failures) == ["dynamo/e0"]
    # The damaged object was dropped from the index: the next push heals it.
    assert push(src, remote).objects == 1
    assert layer.get_ref("dynamo/e0") == src.get_ref("dynamo/e0")
    assert dst.verify().ok


def test_a_remote_that_is_down_warns_once_and_misses(tmp_path: Path) -> None:
    local = _store(tmp_path, "a")
    make_entries(local, 1)
    layer = RemoteLayer(Remote(f"redis://127.0.0.1:{free_port()}/0"), local)
    with pytest.warns(PrecompileWarning, match="local store only"):
        assert layer.get_ref("dynamo/nothing") is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert layer.get_ref("dynamo/nothing") is None
        assert layer.push(["dynamo/e0"]) is None
        assert layer.refs() == []
        assert not layer.contains("0" * 64)
    # Out of use: none of those calls tried the server again.
    assert layer.stats()["errors"] == 1 and not layer.available
    assert local.verify().ok


def test_a_stopped_remote_times_out_instead_of_hanging(redis_factory: Any, tmp_path: Path) -> None:
    server = redis_factory()
    src = _store(tmp_path, "a")
    make_entries(src, 1)
    push(src, Remote(server.url))
    layer = RemoteLayer(Remote(server.url + "?timeout=0.5"), _store(tmp_path, "b"))
    server.stop()
    try:
        start = time.monotonic()
        with pytest.warns(PrecompileWarning, match="Timeout"):
            assert layer.get_ref("dynamo/e0") is None
        assert time.monotonic() - start < 3
        assert layer.push(["dynamo/e0"]) is None
    finally:
        server.cont()
        server.close()


def test_the_remote_killed_in_the_middle_of_a_push(redis_factory: Any, tmp_path: Path) -> None:
    server = redis_factory()
    src = _store(tmp_path, "a")
    make_entries(src, 6)
    layer = RemoteLayer(Remote(server.url), src)
    watcher = kill_on_command(server, b"obj:")
    with pytest.warns(PrecompileWarning, match="during a push"):
        assert layer.push(src.refs()) is None
    watcher.join(5)
    assert server.proc.poll() is not None, "the server was killed mid-push"
    assert src.verify().ok and len(src.refs()) == 6


def test_the_remote_killed_in_the_middle_of_a_load(redis_factory: Any, tmp_path: Path) -> None:
    server = redis_factory()
    src = _store(tmp_path, "a")
    make_entries(src, 2)
    push(src, Remote(server.url))
    dst = _store(tmp_path, "b")
    layer = RemoteLayer(Remote(server.url), dst)
    watcher = kill_on_command(server, b"obj:")
    with pytest.warns(PrecompileWarning, match="read of 'dynamo/e0'"):
        assert layer.get_ref("dynamo/e0") is None
    watcher.join(5)
    assert server.proc.poll() is not None, "the server was killed mid-load"
    assert dst.get_ref("dynamo/e0") is None
    assert dst.verify().ok


def test_a_pusher_killed_midway_leaves_no_ref_to_a_missing_object(redis_server: Any, tmp_path: Path) -> None:
    src = _store(tmp_path, "a")
    make_entries(src, 30)
    env = {**os.environ, "PYTHONPATH": PACKAGE_ROOT}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "precompile",
            "--store",
            str(src.path),
            "push",
            redis_server.url + "?chunk_size=65536",
        ],
        env=env,
    )
    client = redis_server.client()
    deadline = time.monotonic() + 30
    while client.dbsize() == 0 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    proc.kill()
    assert proc.wait() == -signal.SIGKILL, "the pusher finished before it could be killed"
    usage = remote_usage(Remote(redis_server.url))
    assert usage["entries"] < 30  # refs come last, and it died while uploading objects
    assert usage["missing"] == []
    # Whatever refs made it name complete closures; pull them and verify.
    dst = _store(tmp_path, "b")
    pull(dst, Remote(redis_server.url))
    assert dst.verify().ok


def test_eight_processes_push_the_same_entries_at_once(redis_server: Any, tmp_path: Path) -> None:
    stores = []
    for i in range(8):
        s = _store(tmp_path, f"host{i}")
        refs = make_entries(s, 3)  # deterministic: every host holds the same entries
        stores.append(s)
    env = {**os.environ, "PYTHONPATH": PACKAGE_ROOT}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "precompile",
                "--store",
                str(s.path),
                "push",
                "--json",
                redis_server.url + "?chunk_size=65536",
            ],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for s in stores
    ]
    reports = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        reports.append(json.loads(out))
    assert all(r["refs"] == 3 for r in reports)
    remote = Remote(redis_server.url)
    usage = remote_usage(remote)
    assert usage["missing"] == [] and usage["entries"] == 3
    assert usage["bytes"] == stores[0].usage().reachable_bytes
    dst = _store(tmp_path, "fresh")
    pull(dst, remote)
    assert dst.verify().ok
    for name in refs:
        assert load_entry(dst, name) == load_entry(stores[0], name)


def test_gc_keeps_what_refs_reach_and_what_was_pushed_recently(redis_server: Any, tmp_path: Path) -> None:
    src = _store(tmp_path, "a")
    make_entries(src, 2)
    remote = Remote(redis_server.url)
    push(src, remote)
    orphan = src.put(blob_bytes("orphan", 777))
    src.set_ref("dynamo/tmp", src.put_manifest([orphan], {"kind": "entry"}))
    push(src, remote, ["dynamo/tmp"])
    assert remote.delete_ref("dynamo/tmp")
    before = remote_usage(remote)

    assert remote_gc(remote, grace_seconds=3600)["objects_freed"] == 0
    dry = remote_gc(remote, grace_seconds=0, dry_run=True)
    assert dry["objects_freed"] == 2 and remote_usage(remote)["blobs"] == before["blobs"]
    # Two hours later, a push touches the orphan (it is about to rely on
    # it): that protects it, and only the orphan's old manifest goes.
    client = redis_server.client()
    for key in client.scan_iter(match=remote.keys.base + "meta:*"):
        client.hincrby(key, "t", -2 * 3600 * 1000)
    remote.touch_and_check([orphan])
    assert remote_gc(remote, grace_seconds=3600)["objects_freed"] == 1
    time.sleep(0.01)
    report = remote_gc(remote, grace_seconds=0)
    assert report["objects_freed"] == 1 and report["bytes_freed"] == 777
    after = remote_usage(remote)
    assert after["blobs"] == before["blobs"] - 2 and after["missing"] == []
    dst = _store(tmp_path, "b")
    pull(dst, remote)
    assert dst.verify().ok and len(dst.refs()) == 2


def test_stats_match_the_local_stores_numbers(redis_server: Any, tmp_path: Path) -> None:
    src = _store(tmp_path, "a")
    make_entries(src, 4)
    push(src, Remote(redis_server.url))
    proc = run_precompile("stats", "--remote", redis_server.url, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    local = src.usage()
    assert doc["entries"] == 4
    assert doc["blobs"] == local.objects
    assert doc["bytes"] == local.logical_bytes
    assert doc["unique_bytes"] == local.reachable_bytes
    assert doc["dedup_ratio"] == pytest.approx(local.logical_bytes / local.reachable_bytes)


def test_cli_push_pull_and_gc(redis_server: Any, tmp_path: Path) -> None:
    src = _store(tmp_path, "a")
    make_entries(src, 2)
    url = redis_server.url
    pushed = run_precompile("--store", str(src.path), "push", url, "dynamo/e1", "--json")
    assert pushed.returncode == 0, pushed.stderr
    assert json.loads(pushed.stdout)["refs"] == 1
    assert run_precompile("--store", str(src.path), "push", url, "dynamo/nope").returncode == 2
    dst = tmp_path / "b"
    pulled = run_precompile("--store", str(dst), "pull", url, "--json")
    assert pulled.returncode == 0, pulled.stderr
    assert json.loads(pulled.stdout)["refs"] == 1
    assert Store(str(dst)).refs() == ["dynamo/e1"]
    assert run_precompile("--store", str(dst), "pull", url, "dynamo/e0").returncode == 2
    gc = run_precompile("gc", "--remote", url, "--grace", "0", "--json")
    assert gc.returncode == 0 and json.loads(gc.stdout)["objects_freed"] == 0
    text = run_precompile("--store", str(dst), "pull", url)
    assert "pulled 1 refs" in text.stdout
    down = run_precompile("--store", str(dst), "pull", f"redis://127.0.0.1:{free_port()}/0")
    assert down.returncode == 1 and "error" in down.stderr


def test_a_bad_url_is_refused_at_once() -> None:
    with pytest.raises(ValueError, match="scheme"):
        Remote("http://127.0.0.1:6379")
    with pytest.raises(RemoteError):
        Remote(f"redis://127.0.0.1:{free_port()}/0?connect_timeout=0.2").ping()


def test_a_cluster_through_the_same_url_interface(redis_cluster: Any, tmp_path: Path) -> None:
    src = _store(tmp_path, "a")
    refs = make_entries(src, 3)
    remote = Remote(redis_cluster.url + "?chunk_size=65536")
    assert push(src, remote).objects > 0
    assert push(src, remote).objects == 0
    usage = remote_usage(remote)
    assert usage["entries"] == 3 and usage["missing"] == []
    assert usage["logical_bytes"] == src.usage().logical_bytes
    # Keys really are spread over the three nodes.
    assert all(n.client().dbsize() > 0 for n in redis_cluster.nodes)
    dst = _store(tmp_path, "b")
    pull(dst, remote)
    assert dst.verify().ok
    for name in refs:
        assert load_entry(dst, name) == load_entry(src, name)
    layer = RemoteLayer(Remote(redis_cluster.url), _store(tmp_path, "c"))
    assert layer.get_ref("dynamo/e0") == refs["dynamo/e0"]
    assert remote_gc(remote, grace_seconds=0)["objects_freed"] == 0


def test_namespaces_and_layout_version_keep_remotes_apart(redis_server: Any, tmp_path: Path) -> None:
    src = _store(tmp_path, "a")
    make_entries(src, 1)
    push(src, Remote(redis_server.url + "?namespace=team-a"))
    assert Remote(redis_server.url + "?namespace=team-b").refs() == []
    assert Remote(redis_server.url + "?namespace=team-a").refs() == ["dynamo/e0"]
    keys = {k.decode() for k in redis_server.client().scan_iter()}
    assert keys and all(k.startswith("team-a:v2:") for k in keys)


def test_gc_stops_rather_than_guess_past_a_damaged_manifest(redis_server: Any, tmp_path: Path) -> None:
    src = _store(tmp_path, "a")
    refs = make_entries(src, 2)
    remote = Remote(redis_server.url)
    push(src, remote)
    orphan = src.put(blob_bytes("orphan", 99))
    src.set_ref("dynamo/tmp", src.put_manifest([orphan], {"kind": "entry"}))
    push(src, remote, ["dynamo/tmp"])
    remote.delete_ref("dynamo/tmp")
    client = redis_server.client()
    backend = src.get_manifest(refs["dynamo/e0"])[0][0]
    client.set(remote.keys.obj(backend), b"precompile-manifest\n{}")
    blobs = remote_usage(remote)["blobs"]
    with pytest.raises(StoreError):
        remote_gc(remote, grace_seconds=0)
    assert remote_usage(remote)["blobs"] == blobs - 1  # only the damaged manifest's size was dropped
    assert client.exists(remote.keys.obj(orphan))
    assert backend in remote_usage(remote)["missing"]
    client.delete(remote.keys.meta(backend))
    with pytest.raises(MissingObjectError, match="nothing was deleted"):
        remote_gc(remote, grace_seconds=0)
    assert client.exists(remote.keys.obj(orphan))
    stats = run_precompile("stats", "--remote", redis_server.url, "--json")
    assert stats.returncode == 1 and backend in json.loads(stats.stdout)["missing"]
