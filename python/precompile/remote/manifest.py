"""Recognising a manifest among the bytes a remote hands back.

The remote stores manifests as the opaque bytes the local store wrote; a pull
needs their children to know what to fetch next, without a local store to
parse them (docs/FORMAT.md, manifests).
"""

from __future__ import annotations

import json
import re

__all__ = ["MANIFEST_MAGIC", "digests_in", "is_digest", "manifest_children"]

MANIFEST_MAGIC = b"precompile-manifest\n"
_MANIFEST_VERSION = 1
_HEX = frozenset("0123456789abcdef")
_DIGEST = re.compile(rb"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")


def is_digest(text: str) -> bool:
    """Whether `text` is a lowercase hex BLAKE3 digest."""
    return len(text) == 64 and set(text) <= _HEX


def manifest_children(data: bytes | memoryview) -> list[str] | None:
    """The children of a manifest's bytes, or None when they are not a manifest.

    Bytes with the magic that do not parse as a manifest of a known version
    raise `ValueError`, whatever is wrong with them.
    """
    view = memoryview(data)
    if bytes(view[: len(MANIFEST_MAGIC)]) != MANIFEST_MAGIC:
        return None
    doc = json.loads(bytes(view[len(MANIFEST_MAGIC) :]))  # JSONDecodeError, UnicodeDecodeError: ValueErrors
    if not isinstance(doc, dict):
        raise ValueError("manifest is not a JSON object")
    if doc.get("version") != _MANIFEST_VERSION:
        raise ValueError(f"manifest version {str(doc.get('version'))[:40]!r} is not supported")
    children = doc.get("children")
    if not isinstance(children, list) or not all(isinstance(c, str) and is_digest(c) for c in children):
        raise ValueError("manifest children are not a list of digests")
    return list(children)


def digests_in(data: bytes | memoryview) -> list[str]:
    """Every digest written anywhere in `data`: what a damaged manifest might reach."""
    return sorted({m.decode() for m in _DIGEST.findall(bytes(data))})
