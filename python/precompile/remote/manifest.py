"""Recognising a manifest among the bytes a remote hands back.

The remote stores manifests as the opaque bytes the local store wrote; a pull
needs their children to know what to fetch next, without a local store to
parse them (docs/FORMAT.md, manifests).
"""

from __future__ import annotations

import json

__all__ = ["MANIFEST_MAGIC", "is_digest", "manifest_children"]

MANIFEST_MAGIC = b"precompile-manifest\n"
_MANIFEST_VERSION = 1
_HEX = frozenset("0123456789abcdef")


def is_digest(text: str) -> bool:
    """Whether `text` is a lowercase hex BLAKE3 digest."""
    return len(text) == 64 and set(text) <= _HEX


def manifest_children(data: bytes | memoryview) -> list[str] | None:
    """The children of a manifest's bytes, or None when they are not a manifest.

    Refuses (FormatError-like `ValueError`) a manifest version it does not know.
    """
    view = memoryview(data)
    if bytes(view[: len(MANIFEST_MAGIC)]) != MANIFEST_MAGIC:
        return None
    doc = json.loads(bytes(view[len(MANIFEST_MAGIC) :]))
    if doc.get("version") != _MANIFEST_VERSION:
        raise ValueError(f"manifest version {doc.get('version')!r} is not supported")
    children = doc["children"]
    if not all(isinstance(c, str) and is_digest(c) for c in children):
        raise ValueError("manifest names a child that is not a digest")
    return list(children)
