"""Where the remote keeps things: key names under a namespace and layout version.

The remote holds the same objects and refs as a local store, under keys that
carry a namespace and the layout version (docs/FORMAT.md, remote key layout):

    <ns>:v2:ref:<name>              "<digest> <signer> <signature>" (see `trust`)
    <ns>:v2:obj:{<digest>}          the object's bytes, when it fits one value
    <ns>:v2:chunk:{<digest>}:<i>    chunk i of a larger object
    <ns>:v2:meta:{<digest>}         hash: t (last push, ms), n (size), c (chunks), m (manifest)

The braces are a Redis Cluster hash tag: an object's keys live in one slot,
so one script can delete them together.
"""

from __future__ import annotations

import time

__all__ = ["DEFAULT_NAMESPACE", "LAYOUT_VERSION", "Keys", "glob_escape", "now_ms"]

LAYOUT_VERSION = "v2"
DEFAULT_NAMESPACE = "precompile"


class Keys:
    """Key names under one namespace and layout version."""

    def __init__(self, namespace: str) -> None:
        self.base = f"{namespace}:{LAYOUT_VERSION}:"

    def ref(self, name: str) -> str:
        return f"{self.base}ref:{name}"

    def obj(self, digest: str) -> str:
        return f"{self.base}obj:{{{digest}}}"

    def chunk(self, digest: str, i: int) -> str:
        return f"{self.base}chunk:{{{digest}}}:{i}"

    def meta(self, digest: str) -> str:
        return f"{self.base}meta:{{{digest}}}"

    def ref_name(self, key: bytes | str) -> str:
        k = key.decode() if isinstance(key, bytes) else key
        return k[len(self.base) + len("ref:") :]

    def meta_digest(self, key: bytes | str) -> str:
        k = key.decode() if isinstance(key, bytes) else key
        return k[len(self.base) + len("meta:{") : -1]


def now_ms() -> int:
    """Push times are kept in milliseconds since the epoch."""
    return int(time.time() * 1000)


def glob_escape(text: str) -> str:
    """`text` matched literally inside a SCAN pattern."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)
