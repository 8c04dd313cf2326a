"""Reaching a Redis server or cluster: the URL, the client, and the error for any fault."""

from __future__ import annotations

import urllib.parse
from typing import Any

from .._core import StoreError

__all__ = ["RemoteError", "connect", "split_url"]


class RemoteError(StoreError):
    """The remote could not be reached, timed out, or answered nonsense."""


def split_url(url: str) -> tuple[str, dict[str, str]]:
    """The URL for redis-py, and precompile's own query options taken out of it."""
    parts = urllib.parse.urlsplit(url)
    ours = {"namespace", "chunk_size", "timeout", "connect_timeout"}
    query = urllib.parse.parse_qsl(parts.query)
    options = {k: v for k, v in query if k in ours}
    rest = urllib.parse.urlencode([(k, v) for k, v in query if k not in ours])
    return urllib.parse.urlunsplit(parts._replace(query=rest)), options


def connect(url: str, connect_timeout: float, timeout: float) -> Any:
    """A redis-py client (or cluster client) for `url`; connects on its first command."""
    try:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry
    except ImportError as e:
        raise RemoteError("a remote needs the redis package: pip install 'precompile[remote]'") from e
    scheme = urllib.parse.urlsplit(url).scheme
    # One attempt per command: a retry would multiply the timeout a stalled
    # server costs, and the caller treats any fault as a miss anyway.
    common = {
        "socket_connect_timeout": connect_timeout,
        "socket_timeout": timeout,
        "retry": Retry(NoBackoff(), 0),
    }
    if scheme in ("redis+cluster", "rediss+cluster"):
        from redis.cluster import RedisCluster

        plain = scheme.replace("+cluster", "") + url[len(scheme) :]
        return RedisCluster.from_url(plain, **common)
    return redis.Redis.from_url(url, **common)
