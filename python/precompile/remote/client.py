"""A content-addressed remote on Redis: the connection, chunking, timeouts and counting.

Objects and refs live under the keys `keys` names. Every value read is hashed
before use; one that does not hash to its name is counted and never returned.

This module only talks to the server and raises on faults (`RemoteError`);
`layer` turns faults into misses for the torch integration, and `sync` moves
whole entries.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any

from .._core import CorruptObjectError, MissingObjectError, blake3_hex
from .connection import (
    RemoteError,
    byte_count,
    connect,
    redact_url,
    scrub,
    seconds,
    secrets,
    split_url,
)
from .counters import COUNTERS
from .keys import DEFAULT_NAMESPACE, Keys, glob_escape, now_ms
from .manifest import is_digest
from .replies import MAX_CHUNKS, MAX_OBJECT_BYTES, bytes_or_none, int_field, reply_list, text
from .trust import RefValue, parse_ref_value

__all__ = ["DEFAULT_CHUNK_SIZE", "Remote", "RemoteError", "open_remote"]

# Redis refuses values over 512 MB; smaller chunks also keep one reply from
# holding a connection (and the server) for long.
DEFAULT_CHUNK_SIZE = 64 << 20
MAX_CHUNK_SIZE = 512 << 20
DEFAULT_CONNECT_TIMEOUT = 0.5
DEFAULT_TIMEOUT = 2.0
# Commands per pipeline round trip, and bytes per upload or download round trip.
_BATCH = 512
_UPLOAD_BYTES = 32 << 20
# A round trip that moves data may take longer than `timeout` by one second
# per this many bytes: a slow server still fails, a large object does not.
_MIN_RATE = 8 << 20

# Deletes an object's keys unless a push touched it at or after the cutoff.
# Pushers touch before they check existence, so a blob a push is about to
# rely on is never swept under it.
_DELETE_IF_OLD = """
local t = redis.call('HGET', KEYS[1], 't')
if t and tonumber(t) >= tonumber(ARGV[1]) then return 0 end
redis.call('DEL', unpack(KEYS))
return 1
"""


class _Deadline:
    """Shuts the client's sockets when a round trip outlives its deadline.

    redis-py's socket timeout bounds each read, so a server that trickles a
    byte at a time would hold a command for as long as it likes; this bounds
    the whole round trip.
    """

    def __init__(self, client: Any, limit: float) -> None:
        self.fired = False
        self._client = client
        self._timer = threading.Timer(limit, self._fire)
        self._timer.daemon = True

    def _fire(self) -> None:
        self.fired = True
        _shut_sockets(self._client)

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()


def _shut_sockets(client: Any) -> None:
    """Disconnect every connection of `client`, in use or not (redis-py allows it
    from another thread): a read blocked on one returns at once."""
    pools = []
    if getattr(client, "connection_pool", None) is not None:
        pools.append(client.connection_pool)
    with contextlib.suppress(Exception):
        for node in client.get_nodes() if hasattr(client, "get_nodes") else ():
            conn = getattr(node, "redis_connection", None)
            if conn is not None:
                pools.append(conn.connection_pool)
    for pool in pools:
        with contextlib.suppress(Exception):
            pool.disconnect(inuse_connections=True)


def _faults() -> tuple[type[BaseException], ...]:
    """What redis-py raises for a fault of the server or the network. Looked
    up only once a round trip failed: without the redis package the client
    itself refuses first, with a `RemoteError` that says what to install."""
    try:
        import redis
    except ImportError:
        return (OSError,)
    return (redis.RedisError, redis.exceptions.RedisClusterException, OSError)


class Remote:
    """Objects and refs on a Redis server or cluster.

    Methods raise `RemoteError` for faults of the server or the network and
    for replies that make no sense, `CorruptObjectError` for a value that
    does not hash to its name (or whose recorded size and chunk count do not
    agree) and `MissingObjectError` for an object the remote does not hold.
    Every round trip has a deadline: `timeout`, plus a second per 8 MiB it
    moves. Options that cannot work raise `RemoteConfigError` here.
    `counters` (a mapping of name to count, torch's
    `counters["precompile_remote"]` under `install`) receives hits, misses,
    errors, corrupt values and bytes moved.
    """

    def __init__(
        self,
        url: str,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        timeout: float = DEFAULT_TIMEOUT,
        counters: MutableMapping[str, int] | None = None,
    ) -> None:
        redis_url, options = split_url(url)
        namespace = options.get("namespace", namespace)
        self.chunk_size = byte_count("chunk_size", options.get("chunk_size", chunk_size), MAX_CHUNK_SIZE)
        connect_timeout = seconds("connect_timeout", options.get("connect_timeout", connect_timeout))
        self.timeout = seconds("timeout", options.get("timeout", timeout))
        # Shown in messages and reprs; the password never is.
        self.url = redact_url(url)
        self._secrets = secrets(url)
        self.keys = Keys(namespace)
        self.counters: MutableMapping[str, int] = collections.Counter() if counters is None else counters
        # Connecting waits for the first command (a cluster client would
        # otherwise reach the cluster in the constructor), so a remote that
        # is down costs a miss there and never fails the caller's setup.
        timeout_s = self.timeout
        self._connect: Callable[[], Any] = lambda: connect(redis_url, connect_timeout, timeout_s)
        self._conn: Any = None
        self._delete_if_old: Any = None

    @property
    def _client(self) -> Any:
        if self._conn is None:
            self._conn = self._connect()
        return self._conn

    def __repr__(self) -> str:
        return f"Remote({self.url!r})"

    def redact(self, message: str) -> str:
        """`message` with this remote's passwords shown as `***`."""
        return scrub(message, self._secrets)

    def stats(self) -> dict[str, int]:
        """This handle's counters (see `COUNTERS`), zero where nothing happened."""
        return {name: int(self.counters.get(name, 0)) for name in COUNTERS}

    def _run(self, fn: Callable[[], Any], moves: int = 0) -> Any:
        """Run one round trip under its deadline; every fault becomes a `RemoteError`."""
        limit = self.timeout + moves / _MIN_RATE
        try:
            client = self._client
            with _Deadline(client, limit) as deadline:
                try:
                    return fn()
                except Exception:
                    if deadline.fired:
                        raise TimeoutError(f"no complete reply within {limit:.1f} s") from None
                    raise
        except RemoteError:
            self.counters["errors"] += 1
            raise
        except _faults() as e:
            self.counters["errors"] += 1
            raise RemoteError(f"remote {self.url}: {type(e).__name__}: {scrub(str(e), self._secrets)}") from None
        except Exception as e:  # a reply redis-py could not parse is nonsense, not a crash
            self.counters["errors"] += 1
            raise RemoteError(
                f"remote {self.url} answered nonsense: {type(e).__name__}: {scrub(str(e), self._secrets)}"
            ) from None

    def _pipeline(self, commands: Iterable[tuple[str, tuple[Any, ...]]], moves: int = 0) -> list[Any]:
        """Run (method, args) commands in pipelined round trips; results in order.

        `moves` is the bytes the commands carry, for the deadline.
        """
        commands = list(commands)
        results: list[Any] = []
        for start in range(0, len(commands), _BATCH):

            def batch(
                part: list[tuple[str, tuple[Any, ...]]] = commands[start : start + _BATCH],
            ) -> list[Any]:
                pipe = self._client.pipeline(transaction=False)
                for method, args in part:
                    getattr(pipe, method)(*args)
                return list(pipe.execute())

            got = reply_list(self._run(batch, moves), min(_BATCH, len(commands) - start), "a pipeline")
            results += got
        return results

    # -- refs ----------------------------------------------------------------
    def ping(self) -> None:
        self._run(lambda: self._client.ping())

    def get_ref(self, name: str) -> str | None:
        """The digest ref `name` points at, signed or not; None when absent or unparsable."""
        value = self.get_ref_value(name)
        return None if value is None else value.digest

    def get_ref_value(self, name: str) -> RefValue | None:
        """What ref `name` holds (digest and signature), unchecked; None when absent.

        A value that is no ref value is counted as corrupt and is a miss.
        """
        raw = bytes_or_none(self._run(lambda: self._client.get(self.keys.ref(name))), f"ref {name!r}")
        if raw is None:
            self.counters["ref_misses"] += 1
            return None
        value = parse_ref_value(raw)
        if value is None:
            self.counters["corrupt"] += 1
            return None
        self.counters["ref_hits"] += 1
        return value

    def set_refs(self, refs: Mapping[str, RefValue]) -> None:
        """Point each ref at its value. Each SET is atomic (digest and signature
        together); the last writer wins."""
        self._pipeline(("set", (self.keys.ref(n), v.encode())) for n, v in refs.items())
        self.counters["refs_written"] += len(refs)

    def delete_ref(self, name: str) -> bool:
        return bool(self._run(lambda: self._client.delete(self.keys.ref(name))))

    def refs(self, prefix: str = "") -> list[str]:
        pattern = self.keys.ref(glob_escape(prefix)) + "*"
        keys = self._run(lambda: list(self._client.scan_iter(match=pattern, count=1000)))
        names = [self.keys.ref_name(text(k, "a ref key")) for k in reply_list(keys, None, "a ref listing")]
        return sorted(set(names))

    def ref_values(self, names: list[str]) -> dict[str, RefValue | None]:
        """What each ref holds, unchecked; None where absent or unparsable."""
        values = self._pipeline(("get", (self.keys.ref(n),)) for n in names)
        return {n: parse_ref_value(v) if isinstance(v, bytes) else None for n, v in zip(names, values)}

    def ref_digests(self, names: list[str]) -> dict[str, str | None]:
        """The digest each ref points at, signed or not (what gc keeps reachable)."""
        return {n: None if v is None else v.digest for n, v in self.ref_values(names).items()}

    # -- objects -------------------------------------------------------------
    def touch_and_check(self, digests: list[str]) -> set[str]:
        """Mark `digests` as being pushed now; returns those the remote holds.

        The touch comes first so that a concurrent `gc` keeps them (see
        `_DELETE_IF_OLD`) between this check and the refs that will name them.
        """
        now = now_ms()
        commands: list[tuple[str, tuple[Any, ...]]] = []
        for d in digests:
            commands += [
                ("hset", (self.keys.meta(d), "t", now)),
                ("hmget", (self.keys.meta(d), ["n", "c"])),
                ("exists", (self.keys.obj(d),)),
            ]
        results = self._pipeline(commands)
        present = set()
        for i, d in enumerate(digests):
            n, c = reply_list(results[3 * i + 1], 2, "an object's size and chunk count")
            exists = results[3 * i + 2]
            if not isinstance(exists, int):
                raise RemoteError(f"the remote answered {type(exists).__name__} for EXISTS, not an integer")
            # A field that does not parse is damage: the object is uploaded again.
            size, chunks = int_field(n, MAX_OBJECT_BYTES), int_field(c or b"0", MAX_CHUNKS)
            if size is not None and chunks is not None and (chunks > 0 or exists):
                present.add(d)
        return present

    def put_blobs(self, blobs: Iterable[tuple[str, Any, bool]]) -> int:
        """Upload (digest, buffer, is_manifest) triples; returns bytes sent.

        A chunked object's chunk count is recorded before its chunks, so that
        chunks a pusher killed midway left behind are listed (`index`) and
        collected (`remote_gc`). The size field goes last, so an object
        counts as present (`touch_and_check`) only once all of its bytes are
        there.
        """
        sent = 0
        commands: list[tuple[str, tuple[Any, ...]]] = []
        pending = 0
        for digest, data, is_manifest in blobs:
            view = memoryview(data).cast("B")
            size = len(view)
            if size <= self.chunk_size:
                commands.append(("set", (self.keys.obj(digest), view)))
                chunks = 0
            else:
                chunks = -(-size // self.chunk_size)
                if chunks > MAX_CHUNKS:
                    raise RemoteError(
                        f"object {digest} ({size} bytes) needs more than {MAX_CHUNKS} chunks of {self.chunk_size} bytes"
                    )
                planned = {"t": now_ms(), "c": chunks, "m": int(is_manifest)}
                commands.append(("hset", (self.keys.meta(digest), None, None, planned)))
                for i in range(chunks):
                    part = view[i * self.chunk_size : (i + 1) * self.chunk_size]
                    commands.append(("set", (self.keys.chunk(digest, i), part)))
            fields = {"t": now_ms(), "n": size, "c": chunks, "m": int(is_manifest)}
            commands.append(("hset", (self.keys.meta(digest), None, None, fields)))
            pending += size
            sent += size
            if pending >= _UPLOAD_BYTES:
                self._pipeline(commands, pending)
                commands, pending = [], 0
        if commands:
            self._pipeline(commands, pending)
        return sent

    def get_blobs(self, digests: list[str]) -> dict[str, bytes]:
        """Read and verify `digests`; raises on the first missing or corrupt one."""
        return {d: data for d, (data, _) in self.get_objects(digests).items()}

    def get_objects(self, digests: list[str]) -> dict[str, tuple[bytes, bool]]:
        """Read and verify `digests`: {digest: (bytes, flagged as a manifest)}.

        The size and chunk count are read first and checked against each
        other and against `MAX_OBJECT_BYTES` / `MAX_CHUNKS`, so a damaged
        meta hash is a `CorruptObjectError`, never a large allocation; each
        value read must then add up to that size and hash to its name.
        Raises on the first missing or corrupt object.
        """
        digests = list(dict.fromkeys(digests))
        metas = self._pipeline(("hmget", (self.keys.meta(d), ["n", "c", "m"])) for d in digests)
        plans: dict[str, tuple[int, int, bool]] = {}
        for d, fields in zip(digests, metas):
            n, c, m = reply_list(fields, 3, "an object's meta fields")
            if n is None:
                self.counters["missing_objects"] += 1
                raise MissingObjectError(f"object {d} is not on the remote")
            size, chunks = int_field(n, MAX_OBJECT_BYTES), int_field(c or b"0", MAX_CHUNKS)
            if size is None or chunks is None or not _plausible(size, chunks):
                self._damaged(d)
                raise CorruptObjectError(
                    f"remote object {d}: size {n[:24]!r} and chunk count {c and c[:24]!r} disagree"
                )
            plans[d] = (size, chunks, m == b"1")
        out: dict[str, tuple[bytes, bool]] = {}
        for part, moves in _batches(digests, plans):
            keys = [(d, i) for d in part for i in range(max(plans[d][1], 1))]
            values = self._pipeline(
                (("get", (self.keys.obj(d) if plans[d][1] == 0 else self.keys.chunk(d, i),)) for d, i in keys),
                moves,
            )
            parts: dict[str, list[bytes]] = {d: [] for d in part}
            for (d, _), value in zip(keys, values):
                parts[d].append(bytes_or_none(value, f"object {d}") or b"")
            for d in part:
                size, _, flagged = plans[d]
                data = b"".join(parts[d])
                if len(data) != size or blake3_hex(data) != d:
                    self._damaged(d)
                    raise CorruptObjectError(
                        f"remote object {d} does not match its digest ({len(data)} bytes, {size} expected)"
                    )
                self.counters["blobs_read"] += 1
                self.counters["bytes_read"] += len(data)
                out[d] = (data, flagged)
        return out

    def _damaged(self, digest: str) -> None:
        """Count a damaged object and drop its size field, so that the next
        push uploads it again instead of trusting what is there."""
        self.counters["corrupt"] += 1
        try:
            self._run(lambda: self._client.hdel(self.keys.meta(digest), "n"))
        except RemoteError:
            pass  # the next reader finds it damaged too

    def index(self) -> dict[str, dict[str, int]]:
        """Every object the remote knows: {digest: {t, n, c, m}} (n absent: incomplete).

        t is the last push that touched it, in milliseconds since the epoch.
        A field that does not parse, or is past the sane limits, is left out.
        """
        pattern = self.keys.base + "meta:*"
        keys = reply_list(self._run(lambda: list(self._client.scan_iter(match=pattern, count=1000))), None, "SCAN")
        digests = [d for d in (self.keys.meta_digest(text(k, "a meta key")) for k in keys) if is_digest(d)]
        values = self._pipeline(("hmget", (self.keys.meta(d), ["t", "n", "c", "m"])) for d in digests)
        limits = {"t": 1 << 62, "n": MAX_OBJECT_BYTES, "c": MAX_CHUNKS, "m": 1}
        out = {}
        for d, fields in zip(digests, values):
            parsed = {k: int_field(v, limits[k]) for k, v in zip("tncm", reply_list(fields, 4, "meta fields"))}
            out[d] = {k: v for k, v in parsed.items() if v is not None}
        return out

    def stored_bytes(self, objects: dict[str, int]) -> dict[str, int]:
        """Bytes held under each object's data keys, for {digest: chunk count}."""
        keys = [(d, self.keys.obj(d)) for d in objects]
        keys += [(d, self.keys.chunk(d, i)) for d, c in objects.items() for i in range(min(c, MAX_CHUNKS))]
        lengths = self._pipeline(("strlen", (k,)) for _, k in keys)
        out = dict.fromkeys(objects, 0)
        for (d, _), length in zip(keys, lengths):
            out[d] += length if isinstance(length, int) and length > 0 else 0
        return out

    def delete_if_old(self, digest: str, chunks: int, cutoff_ms: int) -> bool:
        """Delete an object's keys atomically unless a push touched it since `cutoff_ms`."""
        keys = [self.keys.meta(digest), self.keys.obj(digest)]
        keys += [self.keys.chunk(digest, i) for i in range(min(chunks, MAX_CHUNKS))]

        def run() -> Any:
            if self._delete_if_old is None:
                self._delete_if_old = self._client.register_script(_DELETE_IF_OLD)
            return self._delete_if_old(keys, [int(cutoff_ms)])

        return bool(self._run(run))

    def close(self) -> None:
        if self._conn is None:
            return
        with contextlib.suppress(Exception):
            self._conn.close()


def _plausible(size: int, chunks: int) -> bool:
    """Whether `size` bytes fit `chunks` chunks (0: one value) of 1 byte to 512 MiB."""
    if chunks == 0:
        return size <= MAX_CHUNK_SIZE
    return chunks <= size <= chunks * MAX_CHUNK_SIZE


def _batches(digests: list[str], plans: dict[str, tuple[int, int, bool]]) -> Iterable[tuple[list[str], int]]:
    """Digests in groups of about `_UPLOAD_BYTES` (a larger object alone), with their bytes."""
    part: list[str] = []
    pending = 0
    for d in digests:
        size = plans[d][0]
        if part and pending + size > _UPLOAD_BYTES:
            yield part, pending
            part, pending = [], 0
        part.append(d)
        pending += size
    if part:
        yield part, pending


def open_remote(url: str | Remote | None = None, **options: Any) -> Remote | None:
    """A `Remote` for `url` (default `$PRECOMPILE_REMOTE`), or None when there is none.

    URLs: `redis://[user:pass@]host:port/db`, `rediss://...` (TLS),
    `unix:///path/to/socket`, and `redis+cluster://host:port` (or
    `rediss+cluster://`) for a Redis Cluster reached through any of its
    nodes. Query options `namespace`, `chunk_size` (bytes), `timeout` and
    `connect_timeout` (seconds) override the keyword arguments; an unknown
    option, or a value that cannot work, raises `RemoteConfigError` here.
    """
    if isinstance(url, Remote):
        return url
    if url is None:
        url = os.environ.get("PRECOMPILE_REMOTE") or None
    if url is None:
        return None
    return Remote(url, **options)
