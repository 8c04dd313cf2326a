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
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any

from .._core import CorruptObjectError, MissingObjectError, blake3_hex
from .connection import RemoteError, connect, split_url
from .counters import COUNTERS
from .keys import DEFAULT_NAMESPACE, Keys, glob_escape, now_ms
from .manifest import is_digest
from .trust import RefValue, parse_ref_value

__all__ = ["DEFAULT_CHUNK_SIZE", "Remote", "RemoteError", "open_remote"]

# Redis refuses values over 512 MB; smaller chunks also keep one reply from
# holding a connection (and the server) for long.
DEFAULT_CHUNK_SIZE = 64 << 20
DEFAULT_CONNECT_TIMEOUT = 0.5
DEFAULT_TIMEOUT = 2.0
# Commands per pipeline round trip, and bytes per upload round trip.
_BATCH = 512
_UPLOAD_BYTES = 32 << 20

# Deletes an object's keys unless a push touched it at or after the cutoff.
# Pushers touch before they check existence, so a blob a push is about to
# rely on is never swept under it.
_DELETE_IF_OLD = """
local t = redis.call('HGET', KEYS[1], 't')
if t and tonumber(t) >= tonumber(ARGV[1]) then return 0 end
redis.call('DEL', unpack(KEYS))
return 1
"""


class Remote:
    """Objects and refs on a Redis server or cluster.

    Methods raise `RemoteError` for faults of the server or the network,
    `CorruptObjectError` for a value that does not hash to its name and
    `MissingObjectError` for an object the remote does not hold.
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
        chunk_size = int(options.get("chunk_size", chunk_size))
        connect_timeout = float(options.get("connect_timeout", connect_timeout))
        timeout = float(options.get("timeout", timeout))
        if not 0 < chunk_size <= 512 << 20:
            raise ValueError("chunk_size must be between 1 byte and 512 MiB")
        self.url = url
        self.keys = Keys(namespace)
        self.chunk_size = chunk_size
        self.timeout = timeout
        self.counters: MutableMapping[str, int] = collections.Counter() if counters is None else counters
        scheme = urllib.parse.urlsplit(redis_url).scheme
        if scheme not in ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster"):
            raise ValueError(f"unsupported remote URL scheme {scheme!r} (redis, rediss, unix, redis+cluster)")
        # Connecting waits for the first command (a cluster client would
        # otherwise reach the cluster in the constructor), so a remote that
        # is down costs a miss there and never fails the caller's setup.
        self._connect: Callable[[], Any] = lambda: connect(redis_url, connect_timeout, timeout)
        self._conn: Any = None
        self._delete_if_old: Any = None

    @property
    def _client(self) -> Any:
        if self._conn is None:
            self._conn = self._connect()
        return self._conn

    def __repr__(self) -> str:
        return f"Remote({self.url!r})"

    def stats(self) -> dict[str, int]:
        """This handle's counters (see `COUNTERS`), zero where nothing happened."""
        return {name: int(self.counters.get(name, 0)) for name in COUNTERS}

    def _run(self, fn: Any, *args: Any) -> Any:
        import redis

        try:
            return fn(*args)
        except (redis.RedisError, redis.exceptions.RedisClusterException, OSError) as e:
            self.counters["errors"] += 1
            raise RemoteError(f"remote {self.url}: {type(e).__name__}: {e}") from e

    def _pipeline(self, commands: Iterable[tuple[str, tuple[Any, ...]]]) -> list[Any]:
        """Run (method, args) commands in pipelined round trips; results in order."""
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

            results += self._run(batch)
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
        raw = self._run(lambda: self._client.get(self.keys.ref(name)))
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
        names = self._run(lambda: [self.keys.ref_name(k) for k in self._client.scan_iter(match=pattern, count=1000)])
        return sorted(set(names))

    def ref_values(self, names: list[str]) -> dict[str, RefValue | None]:
        """What each ref holds, unchecked; None where absent or unparsable."""
        values = self._pipeline(("get", (self.keys.ref(n),)) for n in names)
        return {n: None if v is None else parse_ref_value(v) for n, v in zip(names, values)}

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
            (n, c), exists = results[3 * i + 1], results[3 * i + 2]
            if n is not None and (int(c or 0) > 0 or exists):
                present.add(d)
        return present

    def put_blobs(self, blobs: Iterable[tuple[str, Any, bool]]) -> int:
        """Upload (digest, buffer, is_manifest) triples; returns bytes sent.

        The data goes first and the size field last, so an object counts as
        present (`touch_and_check`) only once all of its bytes are there.
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
                for i in range(chunks):
                    part = view[i * self.chunk_size : (i + 1) * self.chunk_size]
                    commands.append(("set", (self.keys.chunk(digest, i), part)))
            fields = {"t": now_ms(), "n": size, "c": chunks, "m": int(is_manifest)}
            commands.append(("hset", (self.keys.meta(digest), None, None, fields)))
            pending += size
            sent += size
            if pending >= _UPLOAD_BYTES:
                self._pipeline(commands)
                commands, pending = [], 0
        if commands:
            self._pipeline(commands)
        return sent

    def get_blobs(self, digests: list[str]) -> dict[str, bytes]:
        """Read and verify `digests`; raises on the first missing or corrupt one."""
        values = self._pipeline(("get", (self.keys.obj(d),)) for d in digests)
        out: dict[str, bytes] = {}
        chunked = []
        for d, value in zip(digests, values):
            if value is None:
                chunked.append(d)
            else:
                out[d] = value
        if chunked:
            metas = self._pipeline(("hmget", (self.keys.meta(d), ["n", "c"])) for d in chunked)
            for d, (n, c) in zip(chunked, metas):
                if n is None or not int(c or 0):
                    self.counters["missing_objects"] += 1
                    raise MissingObjectError(f"object {d} is not on the remote")
                parts = self._pipeline(("get", (self.keys.chunk(d, i),)) for i in range(int(c)))
                if any(p is None for p in parts):
                    self._damaged(d)
                    raise CorruptObjectError(f"remote object {d} lost a chunk")
                out[d] = b"".join(parts)
        for d in digests:
            data = out[d]
            if blake3_hex(data) != d:
                self._damaged(d)
                raise CorruptObjectError(f"remote object {d} does not match its digest ({len(data)} bytes)")
            self.counters["blobs_read"] += 1
            self.counters["bytes_read"] += len(data)
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
        """
        pattern = self.keys.base + "meta:*"
        keys = self._run(lambda: list(self._client.scan_iter(match=pattern, count=1000)))
        digests = [self.keys.meta_digest(k) for k in keys]
        values = self._pipeline(("hmget", (self.keys.meta(d), ["t", "n", "c", "m"])) for d in digests)
        out = {}
        for d, fields in zip(digests, values):
            if is_digest(d):
                out[d] = {k: int(v) for k, v in zip("tncm", fields) if v is not None}
        return out

    def delete_if_old(self, digest: str, chunks: int, cutoff_ms: int) -> bool:
        """Delete an object's keys atomically unless a push touched it since `cutoff_ms`."""
        keys = [self.keys.meta(digest), self.keys.obj(digest)]
        keys += [self.keys.chunk(digest, i) for i in range(chunks)]

        def run() -> Any:
            if self._delete_if_old is None:
                self._delete_if_old = self._client.register_script(_DELETE_IF_OLD)
            return self._delete_if_old(keys, [int(cutoff_ms)])

        return bool(self._run(run))

    def close(self) -> None:
        if self._conn is None:
            return
        with contextlib.suppress(OSError):
            self._conn.close()


def open_remote(url: str | Remote | None = None, **options: Any) -> Remote | None:
    """A `Remote` for `url` (default `$PRECOMPILE_REMOTE`), or None when there is none.

    URLs: `redis://[user:pass@]host:port/db`, `rediss://...` (TLS),
    `unix:///path/to/socket`, and `redis+cluster://host:port` (or
    `rediss+cluster://`) for a Redis Cluster reached through any of its
    nodes. Query options `namespace`, `chunk_size` (bytes), `timeout` and
    `connect_timeout` (seconds) override the keyword arguments.
    """
    if isinstance(url, Remote):
        return url
    if url is None:
        url = os.environ.get("PRECOMPILE_REMOTE") or None
    if url is None:
        return None
    return Remote(url, **options)
