"""Reaching a Redis server or cluster: the URL, its options, the client, and the errors."""

from __future__ import annotations

import math
import urllib.parse
from typing import Any

from .._core import StoreError

__all__ = ["RemoteConfigError", "RemoteError", "connect", "redact_url", "scrub", "secrets", "split_url"]


class RemoteError(StoreError):
    """The remote could not be reached, timed out, or answered nonsense."""


class RemoteConfigError(RemoteError, ValueError):
    """A remote URL or option that cannot work: refused when the remote is opened."""


# precompile's own query options; the rest go to redis-py.
OUR_OPTIONS = frozenset({"namespace", "chunk_size", "timeout", "connect_timeout"})
# What redis-py may take from the URL. Anything else would reach the
# connection class as an unknown keyword (a TypeError at the first
# command); socket timeouts and retries are left out because the deadline
# per round trip is precompile's.
REDIS_OPTIONS = frozenset(
    {
        "db",
        "username",
        "password",
        "client_name",
        "protocol",
        "socket_keepalive",
        "socket_read_size",
        "max_connections",
        "health_check_interval",
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_ca_data",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_password",
        "ssl_check_hostname",
        "ssl_min_version",
    }
)
SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")
_SECRET_QUERY = frozenset({"password", "ssl_password"})


def redact_url(url: str) -> str:
    """`url` with its password (user info or query option) shown as `***`."""
    try:
        parts = urllib.parse.urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, host = netloc.rsplit("@", 1)
            user = userinfo.split(":", 1)[0] if ":" in userinfo else ""
            netloc = f"{user}:***@{host}"
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        if any(k in _SECRET_QUERY for k, _ in query):
            shown = urllib.parse.urlencode([(k, "***" if k in _SECRET_QUERY else v) for k, v in query], safe="*")
            parts = parts._replace(query=shown)
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        return "<unparsable remote URL>"


def secrets(url: str) -> list[str]:
    """The passwords `url` carries, to scrub from messages that might echo them."""
    try:
        parts = urllib.parse.urlsplit(url)
        found = [parts.password or ""]
        found += [v for k, v in urllib.parse.parse_qsl(parts.query) if k in _SECRET_QUERY]
    except ValueError:
        return []
    found += [urllib.parse.unquote(f) for f in found]
    return sorted({f for f in found if f}, key=len, reverse=True)


def scrub(message: str, hidden: list[str]) -> str:
    for secret in hidden:
        message = message.replace(secret, "***")
    return message


def split_url(url: str) -> tuple[str, dict[str, str]]:
    """The URL for redis-py, and precompile's own query options taken out of it.

    Raises `RemoteConfigError` for a scheme or query option it does not know.
    """
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 -- a bad port raises here, not at the first command
    except ValueError as e:
        raise RemoteConfigError(f"remote URL {redact_url(url)}: {e}") from None
    if parts.scheme not in SCHEMES:
        raise RemoteConfigError(
            f"unsupported remote URL scheme {parts.scheme!r} (redis, rediss, unix, redis+cluster, rediss+cluster)"
        )
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    unknown = sorted({k for k, _ in query if k not in OUR_OPTIONS and k not in REDIS_OPTIONS})
    if unknown:
        raise RemoteConfigError(
            f"remote URL {redact_url(url)}: unknown option {unknown[0]!r} "
            f"(precompile takes {', '.join(sorted(OUR_OPTIONS))}; redis-py takes {', '.join(sorted(REDIS_OPTIONS))})"
        )
    options = {k: v for k, v in query if k in OUR_OPTIONS}
    rest = urllib.parse.urlencode([(k, v) for k, v in query if k not in OUR_OPTIONS])
    return urllib.parse.urlunsplit(parts._replace(query=rest)), options


def seconds(name: str, value: Any) -> float:
    """A timeout option: a finite number of seconds above zero."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise RemoteConfigError(f"remote option {name}={value!r} is not a number of seconds") from None
    if not math.isfinite(out) or out <= 0 or out > 86400:
        raise RemoteConfigError(f"remote option {name}={value!r} must be between 0 and 86400 seconds")
    return out


def byte_count(name: str, value: Any, limit: int) -> int:
    """A size option: a whole number of bytes in [1, limit]."""
    try:
        out = int(value)
    except (TypeError, ValueError, OverflowError):
        raise RemoteConfigError(f"remote option {name}={value!r} is not a whole number of bytes") from None
    if not 0 < out <= limit:
        raise RemoteConfigError(f"remote option {name}={value!r} must be between 1 byte and {limit} bytes")
    return out


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
