"""The remote under faults and bad replies: each defect a misbehaving server or a
damaged key could cause, against real redis-servers and a scripted stand-in
(`support/resp_server.py`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tracemalloc
import warnings
from pathlib import Path
from typing import Any

import pytest
from support.processes import PACKAGE_ROOT, child_env, run_precompile
from support.redis_servers import free_port
from support.resp_server import Reply, StandInServer, array, bulk, handshake, integer
from support.synthetic import blob_bytes, make_entries

from precompile import CorruptObjectError, PrecompileWarning, SigningKey, Store, StoreError
from precompile.remote import (
    MANIFEST_MAGIC,
    Remote,
    RemoteConfigError,
    RemoteError,
    RemoteLayer,
    pull,
    push,
    remote_gc,
    remote_usage,
)
from precompile.remote.trust import RefValue


def _store(tmp_path: Path, name: str) -> Store:
    return Store(str(tmp_path / name))


def test_a_huge_chunk_count_is_damage_not_an_allocation(redis_server: Any, tmp_path: Path) -> None:
    src = _store(tmp_path, "a")
    digest = src.put(b"ten bytes!")
    remote = Remote(redis_server.url)
    remote.put_blobs([(digest, src.get(digest), False)])
    client = redis_server.client()
    client.delete(remote.keys.obj(digest))
    client.hset(remote.keys.meta(digest), mapping={"c": 2_000_000})
    tracemalloc.start()
    try:
        with pytest.raises(CorruptObjectError, match="disagree"):
            remote.get_blobs([digest])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 << 20
    assert remote.stats()["corrupt"] == 1


def _trickle(value: bytes, drip: float) -> Any:
    def script(command: list[bytes]) -> Reply:
        return handshake(command) or Reply(bulk(value), drip=drip)

    return script


def test_a_server_that_trickles_costs_about_the_timeout(tmp_path: Path, signed_fleet: tuple[str, str]) -> None:
    # One byte every 0.2 s never trips a 0.5 s socket timeout; a 70-byte reply
    # would hold the read for 14 s without a deadline on the whole round trip.
    with StandInServer(_trickle(b"a" * 64, 0.2)) as server:
        layer = RemoteLayer(Remote(server.url + "?timeout=0.5"), _store(tmp_path, "a"))
        start = time.monotonic()
        with pytest.warns(PrecompileWarning, match="Timeout"):
            assert layer.get_ref("dynamo/x") is None
        assert time.monotonic() - start < 6
        assert layer.stats()["errors"] == 1


@pytest.mark.parametrize(
    "query",
    [
        "foo=bar",
        "timeout=inf",
        "timeout=nan",
        "timeout=0",
        "timeout=-1",
        "connect_timeout=x",
        "chunk_size=abc",
        "chunk_size=0",
    ],
)
def test_a_bad_url_option_is_refused_when_opened(redis_server: Any, query: str) -> None:
    with pytest.raises(RemoteConfigError) as info:
        Remote(f"{redis_server.url}?{query}")
    assert isinstance(info.value, StoreError) and isinstance(info.value, ValueError)
    assert "\n" not in str(info.value) and query.split("=")[0] in str(info.value)


_WRONG_TYPES = [integer(7), array([integer(1)]), b"%1\r\n+a\r\n+b\r\n", b",1.5\r\n", b"#t\r\n"]


@pytest.mark.parametrize("reply", _WRONG_TYPES, ids=lambda r: r[:2].decode())
def test_a_wrong_type_reply_is_a_miss(tmp_path: Path, reply: bytes) -> None:
    local = _store(tmp_path, "a")
    refs = make_entries(local, 1)
    with StandInServer(lambda c: handshake(c) or Reply(reply)) as server:
        remote = Remote(server.url)
        with pytest.raises(RemoteError):
            remote.get_ref("dynamo/e0")
        layer = RemoteLayer(Remote(server.url), local, retry_after=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrecompileWarning)
            assert layer.get_ref("dynamo/x") is None
            assert not layer.contains("0" * 64)
            assert layer.refs() == []
            # A save already on disk: the push fails quietly, nothing raises.
            assert layer.push(list(refs)) is None
    assert local.verify().ok


def _pusher(store: Path, url: str) -> subprocess.Popen[bytes]:
    code = (
        "import sys; from precompile import Store; from precompile.remote import Remote, push\n"
        "push(Store(sys.argv[1]), Remote(sys.argv[2]), ['dynamo/big'])\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{PACKAGE_ROOT}"}
    return subprocess.Popen([sys.executable, "-c", code, str(store), url], env=env)


def test_chunks_of_a_pusher_killed_mid_upload_are_listed_and_collected(
    redis_server: Any, tmp_path: Path, signed_fleet: tuple[str, str]
) -> None:
    src = _store(tmp_path, "a")
    blobs = [src.put(os.urandom(24 << 20)) for _ in range(4)]
    src.set_ref("dynamo/big", src.put_manifest(blobs, {"kind": "entry"}))
    client = redis_server.client()
    url = redis_server.url + "?chunk_size=262144"
    remote = Remote(url)
    proc = _pusher(tmp_path / "a", url)
    try:
        deadline = time.monotonic() + 60
        while not any(True for _ in client.scan_iter(match=remote.keys.base + "chunk:*", count=1000)):
            assert proc.poll() is None and time.monotonic() < deadline, "the pusher finished before it was killed"
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert remote.refs() == []
    usage = remote_usage(remote)
    assert usage["incomplete"] >= 1 and usage["incomplete_bytes"] > 0
    stats = run_precompile("stats", "--remote", url, "--json")
    assert json.loads(stats.stdout)["incomplete_bytes"] == usage["incomplete_bytes"]
    assert remote_gc(remote, grace_seconds=3600)["objects_freed"] == 0  # still within the grace period
    freed = remote_gc(remote, grace_seconds=0)
    assert freed["bytes_freed"] >= usage["incomplete_bytes"]
    assert list(client.scan_iter(match=remote.keys.base + "*")) == []
    # A push after the kill completes.
    assert push(src, remote, ["dynamo/big"]).refs == 1


def test_pull_goes_on_past_a_ref_it_cannot_set(
    redis_server: Any, tmp_path: Path, signed_fleet: tuple[str, str]
) -> None:
    src = _store(tmp_path, "a")
    refs = make_entries(src, 2)
    remote = Remote(redis_server.url)
    push(src, remote)
    # Signed by the fleet, so it is refused only when the local store sets it.
    planted = RefValue.signed(SigningKey(signed_fleet[0]), "../escape", refs["dynamo/e0"])
    redis_server.client().set(remote.keys.ref("../escape"), planted.encode())
    dst = _store(tmp_path, "b")
    report = pull(dst, remote)
    assert report.refs == 2 and list(report.failures) == ["../escape"]
    assert all(dst.get_ref(n) == d for n, d in refs.items())
    cli = run_precompile("--store", tmp_path / "c", "pull", redis_server.url)
    assert cli.returncode == 1 and "Traceback" not in cli.stderr
    assert "1 refs failed: ../escape" in cli.stderr and len(cli.stderr.strip().splitlines()) == 1
    assert all(_store(tmp_path, "c").get_ref(n) == d for n, d in refs.items())


def test_a_junk_remote_manifest_is_damage_everywhere(
    redis_server: Any, tmp_path: Path, signed_fleet: tuple[str, str]
) -> None:
    src = _store(tmp_path, "a")
    refs = make_entries(src, 1)
    remote = Remote(redis_server.url)
    push(src, remote)
    orphan = src.put(blob_bytes("named by junk", 7))
    remote.put_blobs([(orphan, src.get(orphan), False)])
    junk = MANIFEST_MAGIC + b"{not json, but it names " + orphan.encode() + b"}"
    junk_digest = src.put(junk)
    remote.put_blobs([(junk_digest, junk, True)])
    remote.set_refs({"dynamo/junk": RefValue.signed(SigningKey(signed_fleet[0]), "dynamo/junk", junk_digest)})

    for args in (("stats", "--remote", redis_server.url), ("gc", "--remote", redis_server.url, "--grace", "0")):
        run = run_precompile(*args, "--json")
        assert "Traceback" not in run.stderr, run.stderr
        assert json.loads(run.stdout)["damaged"] == [junk_digest]
    client = redis_server.client()
    assert client.exists(remote.keys.obj(orphan))  # it may be reached: kept
    pulled = run_precompile("--store", tmp_path / "b", "pull", redis_server.url)
    assert pulled.returncode == 1 and "Traceback" not in pulled.stderr and "dynamo/junk" in pulled.stderr
    dst = _store(tmp_path, "b")
    assert dst.get_ref("dynamo/e0") == refs["dynamo/e0"] and dst.get_ref("dynamo/junk") is None


def test_a_blob_with_the_manifest_magic_travels_as_a_blob(
    redis_server: Any, tmp_path: Path, signed_fleet: tuple[str, str]
) -> None:
    src = _store(tmp_path, "a")
    data = MANIFEST_MAGIC + b"user bytes that only look like a manifest"
    blob = src.put(data)
    src.set_ref("dynamo/magic", src.put_manifest([blob], {"kind": "entry"}))
    remote = Remote(redis_server.url)
    assert push(src, remote).refs == 1
    dst = _store(tmp_path, "b")
    report = pull(dst, remote)
    assert report.refs == 1 and not report.failures
    assert bytes(dst.get(blob)) == data and dst.verify().ok


def test_the_password_is_never_shown(redis_factory: Any, tmp_path: Path, caplog: Any) -> None:
    server = redis_factory()
    secret = "S3cr3tPassw0rd"
    server.client().config_set("requirepass", secret)
    good = f"redis://default:{secret}@127.0.0.1:{server.port}/0"
    wrong = f"redis://default:{secret}x@127.0.0.1:{server.port}/0"
    down = f"redis://default:{secret}@127.0.0.1:{free_port()}/0?password={secret}"
    src = _store(tmp_path, "a")
    make_entries(src, 1)
    shown: list[str] = [repr(Remote(good)), Remote(down).url]
    for url in (wrong, down):
        with pytest.raises(RemoteError) as info:
            Remote(url).ping()
        shown.append(str(info.value))
        layer = RemoteLayer(Remote(url), src)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            layer.get_ref("dynamo/e0")
        shown += [str(w.message) for w in caught]
    with pytest.raises(RemoteConfigError) as bad:
        Remote(good + "?foo=1")
    shown.append(str(bad.value))
    for args in (
        ("--store", tmp_path / "a", "push", good, "--json"),
        ("--store", tmp_path / "b", "pull", good, "--json"),
        ("stats", "--remote", good, "--json"),
        ("stats", "--remote", good),
        ("gc", "--remote", good, "--json"),
        ("--store", tmp_path / "a", "push", wrong),
        ("--store", tmp_path / "a", "push", down),
        ("stats", "--remote", good + "&foo=1"),
    ):
        run = run_precompile(*args)
        assert "Traceback" not in run.stderr, run.stderr
        shown += [run.stdout, run.stderr]
    shown += [r.getMessage() for r in caplog.records]
    assert not [s for s in shown if secret in s]
    assert any("default:***@" in s for s in shown)


_WITHOUT_REDIS = """
import sys, warnings

class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "redis":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Hide())
import torch
from torch._dynamo.utils import counters

import precompile


def double_plus_one(x):
    return x * 2 + 1


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    precompile.install(sys.argv[1], remote="redis://127.0.0.1:1/0", save_on_exit=False)
    torch.compile(double_plus_one)(torch.arange(4.0))
    report = precompile.save()
texts = [str(w.message) for w in caught if isinstance(w.message, precompile.PrecompileWarning)]
print(len(report.entries), counters["precompile"]["miss_load_error"], sum("redis package" in t for t in texts))
"""


@pytest.mark.torch
def test_without_the_redis_package_a_host_saves_locally_and_warns_once(
    tmp_path: Path, signed_fleet: tuple[str, str]
) -> None:
    # A host configured with a remote but without the `[remote]` extra: no
    # load error, no failed save, one warning that names what is missing.
    program = tmp_path / "host.py"
    program.write_text(_WITHOUT_REDIS)
    env = child_env({"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    proc = subprocess.run(
        [sys.executable, str(program), str(tmp_path / "store")], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["1", "0", "1"], proc.stdout + proc.stderr[-3000:]
    assert Store(str(tmp_path / "store")).refs("dynamo/"), "the local save went through"
