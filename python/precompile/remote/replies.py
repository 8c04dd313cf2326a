"""Checking what the server answered before anything uses it.

A reply of the wrong type or shape is the server answering nonsense
(`RemoteError`); a field that does not parse as the count or size it should
be is a damaged object, which the caller treats as a miss.
"""

from __future__ import annotations

from typing import Any

from .connection import RemoteError

__all__ = ["MAX_CHUNKS", "MAX_OBJECT_BYTES", "bytes_or_none", "int_field", "reply_list", "text"]

# Limits a meta hash is checked against before anything is fetched: a count
# or size past them is damage, not a reason to allocate.
MAX_OBJECT_BYTES = 1 << 40
MAX_CHUNKS = 1 << 16


def bytes_or_none(value: Any, what: str) -> bytes | None:
    """A string reply (or nil), refusing any other type."""
    if value is None or isinstance(value, bytes):
        return value
    raise RemoteError(f"the remote answered {type(value).__name__} for {what}, not a string")


def reply_list(value: Any, length: int | None, what: str) -> list[Any]:
    """An array reply of `length` elements (any length when None)."""
    if not isinstance(value, list) or (length is not None and len(value) != length):
        raise RemoteError(f"the remote answered {type(value).__name__} for {what}, not a list of {length}")
    return value


def int_field(value: Any, limit: int) -> int | None:
    """A hash field holding a whole number in [0, limit]; None when absent or not one."""
    if isinstance(value, bytes) and 0 < len(value) <= 20 and value.isdigit():
        number = int(value)
        return number if number <= limit else None
    return None


def text(value: Any, what: str) -> str:
    """A key or name the server listed, as text."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, str):
        return value
    raise RemoteError(f"the remote answered {type(value).__name__} for {what}, not a string")
