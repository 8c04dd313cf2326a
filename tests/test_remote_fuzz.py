"""A fuzz of the remote protocol: every layer operation ends in a hit with the
right bytes, a miss, or a `StoreError`, within its deadline.

Two parts, both seeded (`PRECOMPILE_FUZZ_SEED`, printed) and bounded:
10,000 cases against the scripted stand-in server (malformed RESP, wrong
types, oversized counts, truncated, dropped and trickled replies, random
meta fields), and a few hundred against a real redis-server whose ref, obj,
meta and chunk keys get random garbage written into them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.resp_server import OK, Reply, StandInServer, array, bulk, handshake, integer
from support.synthetic import blob_bytes, make_entries

from precompile import PrecompileWarning, Store, StoreError
from precompile.remote import Remote, RemoteLayer, local_closure, pull, push, remote_usage

SEED = int(os.environ.get("PRECOMPILE_FUZZ_SEED", "0")) or random.SystemRandom().randrange(1, 1 << 31)
STAND_IN_CASES = int(os.environ.get("PRECOMPILE_FUZZ_CASES", "10000"))
REDIS_CASES = 300
# No operation may take this long: a hang, not a slow reply (each round trip has
# a deadline of `timeout`, an operation makes a handful).
HANG = 20.0


class _Unexpected(logging.Handler):
    """Collects what the layer logs when an exception it did not anticipate reaches it."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.getMessage())


@pytest.fixture
def unexpected() -> Any:
    handler = _Unexpected()
    logger = logging.getLogger("precompile.remote.layer")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


class _Truth:
    """What an honest server would hold: one entry, a manifest over a blob and a chunked blob."""

    CHUNK = 1000

    def __init__(self, store: Store) -> None:
        self.blob = store.put(blob_bytes("fuzz-blob", 300))
        self.big = store.put(blob_bytes("fuzz-big", 2500))
        self.root = store.put_manifest([self.blob, self.big], {"kind": "entry"})
        store.set_ref("dynamo/e0", self.root)
        self.data = {d: bytes(store.get(d)) for d in (self.blob, self.big, self.root)}

    def meta(self, digest: str, field: bytes) -> bytes | None:
        if digest not in self.data:
            return None
        size = len(self.data[digest])
        chunks = -(-size // self.CHUNK) if size > self.CHUNK else 0
        return {b"t": b"1", b"n": str(size).encode(), b"c": str(chunks).encode()}.get(
            field, b"1" if digest == self.root else b"0"
        )

    def honest(self, command: list[bytes]) -> bytes:
        name, args = command[0].upper(), command[1:]
        key = args[0].decode(errors="replace") if args else ""
        digest = key[key.find("{") + 1 : key.find("}")] if "{" in key else ""
        if name == b"GET":
            if ":ref:" in key:
                return bulk(self.root.encode() if key.endswith(":ref:dynamo/e0") else None)
            data = self.data.get(digest)
            if data is None:
                return bulk(None)
            if ":obj:" in key:
                return bulk(data if len(data) <= self.CHUNK else None)
            i = int(key.rsplit(":", 1)[1])
            return bulk(data[i * self.CHUNK : (i + 1) * self.CHUNK] or None)
        if name == b"HMGET":
            return array([bulk(self.meta(digest, f)) for f in args[1:]])
        if name == b"SCAN":
            pattern = args[2].decode() if len(args) > 2 else ""
            keys = [b"precompile:v1:ref:dynamo/e0"] if ":ref:" in pattern else []
            return array([bulk(b"0"), array([bulk(k) for k in keys])])
        if name in (b"HSET", b"EXISTS", b"DEL", b"HDEL"):
            return integer(
                1 if name != b"EXISTS" else int(digest in self.data and len(self.data[digest]) <= self.CHUNK)
            )
        if name == b"STRLEN":
            return integer(0)
        if name == b"PING":
            return b"+PONG\r\n"
        return OK


def _bad(rng: random.Random, honest: bytes) -> Reply:
    """One reply of the kinds a broken or hostile server sends."""
    kind = rng.randrange(14)
    junk = rng.randbytes(rng.randrange(1, 40))
    if kind == 0:
        # Garbage; left open now and then, so that the client waits out its deadline.
        return Reply(junk, close=rng.random() < 0.8)
    if kind == 1:
        return Reply(junk + b"\r\n", close=True)
    if kind == 2:
        return Reply(rng.choice([integer(rng.randrange(-5, 1 << 40)), b"#t\r\n", b",1e308\r\n", b"+OK\r\n", b"_\r\n"]))
    if kind == 3:
        return Reply(array([bulk(junk) for _ in range(rng.randrange(0, 5))]))  # an array of the wrong length
    if kind == 4:
        return Reply(b"%1\r\n+" + junk.replace(b"\r", b"") + b"\r\n:1\r\n")  # a map
    if kind == 5:
        return Reply(rng.choice([b"*1000000000\r\n", b"$99999999999\r\n", b"*2147483648\r\n"]), close=True)
    if kind == 6:
        return Reply(honest[: rng.randrange(len(honest) + 1)], close=True)  # truncated
    if kind == 7:
        return Reply(
            rng.choice([b"$abc\r\n", b"*-5\r\n", b":x\r\n", b"$-7\r\n", b"\r\n", b"*1\r\n$3\r\nab"]), close=True
        )
    if kind == 8:
        return Reply(b"-ERR " + junk.replace(b"\r", b"").replace(b"\n", b"") + b"\r\n")
    if kind == 9:
        fields = [
            rng.choice([b"-1", b"1e9", b"9" * 30, b"\xff\xfe", b"0", b"1000000000", b"", b"10", b"3"]) for _ in range(4)
        ]
        return Reply(array([bulk(f) for f in fields[: rng.randrange(1, 5)]]))  # random meta fields
    if kind == 10:
        return Reply(b"$1000000\r\n" + b"x" * 50, drip=0.02)  # trickled, never complete
    if kind == 11:
        return Reply(b"", close=True)
    if kind == 12:
        return Reply(bulk(rng.randbytes(rng.randrange(0, 3000))))
    return Reply(b">2\r\n+message\r\n+x\r\n" + honest)  # a push message first


class _Fuzzer:
    """The stand-in's script: honest replies, with the case's chosen ones made bad."""

    def __init__(self, truth: _Truth) -> None:
        self.truth = truth
        self.rng = random.Random()
        self.rate = 0.0

    def start(self, case: int) -> None:
        self.rng = random.Random(SEED * 100_003 + case)
        self.rate = self.rng.choice([0.0, 0.05, 0.2, 0.5, 1.0])

    def __call__(self, command: list[bytes]) -> Reply:
        opening = handshake(command)
        if opening is not None:
            return opening
        honest = self.truth.honest(command)
        if self.rng.random() < self.rate:
            bad = _bad(self.rng, honest)
            # Few trickles: each costs a whole deadline.
            if bad.drip and self.rng.random() < 0.9:
                return Reply(honest)
            return bad
        return Reply(honest)


def _operations(layer: RemoteLayer, truth: _Truth, source: Store) -> list[tuple[str, Callable[[], Any]]]:
    def get_ref() -> None:
        digest = layer.get_ref("dynamo/e0")
        if digest is not None:
            assert layer.local.get_ref("dynamo/e0") == digest
            local_closure(layer.local, [digest])  # everything it reaches is local

    def contains() -> None:
        if layer.contains(truth.big):
            assert bytes(layer.local.get(truth.big)) == truth.data[truth.big]

    def get() -> None:
        assert bytes(layer.get(truth.blob)) == truth.data[truth.blob]

    def get_many() -> None:
        got = layer.get_many([truth.blob, truth.big])
        assert [bytes(b) for b in got] == [truth.data[truth.blob], truth.data[truth.big]]

    def refs() -> None:
        assert all(isinstance(n, str) for n in layer.refs())

    def push() -> None:
        for data in truth.data.values():
            layer.local.put(data)
        layer.local.set_ref("dynamo/e0", truth.root)
        report = layer.push(["dynamo/e0"])
        assert report is None or report.refs == 1

    return [
        ("get_ref", get_ref),
        ("contains", contains),
        ("get", get),
        ("get_many", get_many),
        ("refs", refs),
        ("push", push),
    ]


def _forget(store: Store, truth: _Truth) -> None:
    """Take the entry out of `store` (a new store per case costs too much disk time)."""
    store.delete_ref("dynamo/e0")
    for d in truth.data:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(store.object_path(d))


def _check(name: str, op: Callable[[], Any], case: int) -> None:
    start = time.monotonic()
    try:
        op()
    except StoreError:
        pass  # a miss (get and get_many raise MissingObjectError) or a typed fault
    except AssertionError:
        raise
    except Exception as e:
        raise AssertionError(f"seed {SEED} case {case}: {name} raised {type(e).__name__}: {e}") from e
    took = time.monotonic() - start
    assert took < HANG, f"seed {SEED} case {case}: {name} took {took:.1f} s"


@pytest.fixture
def fast_dir(tmp_path: Path) -> Any:
    """A directory on tmpfs where there is one: the cases write thousands of small files."""
    if not os.path.isdir("/dev/shm"):
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="precompile-fuzz-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_the_layer_against_a_stand_in_that_misbehaves(fast_dir: Path, unexpected: Any) -> None:
    tmp_path = fast_dir
    print(f"remote fuzz seed {SEED} (PRECOMPILE_FUZZ_SEED={SEED} repeats it)")
    source = Store(str(tmp_path / "source"))
    truth = _Truth(source)
    fuzzer = _Fuzzer(truth)
    started = time.monotonic()
    with StandInServer(fuzzer) as server, warnings.catch_warnings():
        warnings.simplefilter("ignore", PrecompileWarning)
        # A short deadline: a case that waits for bytes that never come costs it.
        remote = Remote(server.url + "?timeout=0.05&connect_timeout=0.5")
        layer = RemoteLayer(remote, source, retry_after=0)
        ops = _operations(layer, truth, source)
        layer.local = Store(str(tmp_path / "local"))
        for case in range(STAND_IN_CASES):
            fuzzer.start(case)
            _forget(layer.local, truth)  # so that reads reach the server
            name, op = ops[fuzzer.rng.randrange(len(ops))]
            _check(name, op, case)
            assert not unexpected.records, f"seed {SEED} case {case}: {unexpected.records}"
            if case % 100 == 0:
                assert layer.local.verify().ok, f"seed {SEED} case {case}: {name} left a damaged local store"
    took = time.monotonic() - started
    print(f"remote fuzz: {STAND_IN_CASES} stand-in cases in {took:.1f} s")


def _garble(rng: random.Random, client: Any, keys: list[bytes]) -> None:
    """Write random garbage over one to three of `keys`: other bytes, other types, other fields."""
    for key in rng.sample(keys, min(len(keys), rng.randrange(1, 4))):
        kind = rng.randrange(7)
        value = rng.randbytes(rng.randrange(0, 200))
        if kind == 0:
            client.delete(key)
        elif kind == 1:
            client.delete(key)
            client.set(key, value)
        elif kind == 2:
            client.delete(key)
            client.rpush(key, value or b"x")  # a list where a string or hash belongs
        elif kind == 3:
            client.delete(key)
            client.hset(key, mapping={b"n": value or b"x", b"c": b"1000000000"})
        elif kind == 4 and client.type(key) == b"hash":
            field = rng.choice([b"n", b"c", b"m", b"t"])
            garbage = rng.choice([b"-1", b"1000000000", b"9" * 40, value, b"0", b"1"])
            client.hset(key, field, garbage)
        elif kind == 5 and client.type(key) == b"string":
            old = client.get(key) or b""
            client.set(key, old[: rng.randrange(len(old) + 1)] + value[:3])  # truncated or extended
        else:
            client.delete(key)
            client.sadd(key, value or b"x")


@pytest.mark.slow
def test_the_layer_against_garbage_in_a_real_redis(
    redis_server: Any, fast_dir: Path, unexpected: Any, signed_fleet: tuple[str, str]
) -> None:
    print(f"remote fuzz seed {SEED} (PRECOMPILE_FUZZ_SEED={SEED} repeats it)")
    source = Store(str(fast_dir / "source"))
    refs = make_entries(source, 2, shared_kib=4)
    url = redis_server.url + "?chunk_size=4096&timeout=1"
    remote = Remote(url)
    push(source, remote)
    client = redis_server.client()
    snapshot = {k: client.dump(k) for k in client.scan_iter(count=1000)}
    keys = sorted(snapshot)
    digests = sorted(d for d in local_closure(source, list(refs.values())))
    started = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrecompileWarning)
        for case in range(REDIS_CASES):
            rng = random.Random(SEED * 7919 + case)
            client.flushall()
            for k, v in snapshot.items():
                client.restore(k, 0, v)
            _garble(rng, client, keys)
            local = Store(str(fast_dir / "local" / str(case)))
            layer = RemoteLayer(Remote(url), local, retry_after=0)
            name = rng.choice(sorted(refs))
            wanted = rng.sample(digests, 2)

            def get_ref() -> None:
                digest = layer.get_ref(name)
                if digest is not None:
                    assert local.get_ref(name) == digest
                    local_closure(local, [digest])

            def get() -> None:
                assert bytes(layer.get(wanted[0])) == bytes(source.get(wanted[0]))

            def get_many() -> None:
                got = layer.get_many(wanted)
                assert [bytes(b) for b in got] == [bytes(source.get(d)) for d in wanted]

            def contains() -> None:
                if layer.contains(wanted[0]):
                    assert bytes(local.get(wanted[0])) == bytes(source.get(wanted[0]))

            def pull_all() -> None:
                report = pull(local, Remote(url))
                for ref in set(refs) - set(report.failures):
                    local_closure(local, [str(local.get_ref(ref))])

            ops: list[tuple[str, Callable[[], Any]]] = [
                ("get_ref", get_ref),
                ("get", get),
                ("get_many", get_many),
                ("contains", contains),
                ("refs", lambda: layer.refs()),
                ("push", lambda: layer.push([])),
                ("pull", pull_all),
                ("stats", lambda: remote_usage(Remote(url))),
            ]
            op_name, op = ops[rng.randrange(len(ops))]
            _check(op_name, op, case)
            assert not unexpected.records, f"seed {SEED} case {case}: {unexpected.records}"
            assert local.verify().ok, f"seed {SEED} case {case}: {op_name} left a damaged local store"
    print(f"remote fuzz: {REDIS_CASES} redis-server cases in {time.monotonic() - started:.1f} s")
