"""Naming entries on the command line: a ref name, a digest or a unique digest
prefix, or the compiled function's name (`MLP.forward`, or just `forward`
when only one function has that name).

What a name matches is worked out from the store's own refs and entry
manifests; an ambiguous name is refused with the candidates, never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .. import paths
from .._core import StoreError
from ..schema import EntryMeta, parse_meta
from .views import Source, UsageError

__all__ = ["Entry", "entries", "entry_info", "find", "resolve"]

MIN_PREFIX = 4
_HEX = re.compile(r"[0-9a-f]+")
_SHOWN = 5


def entry_info(src: Source, digest: str) -> dict[str, Any] | None:
    """What a person looks for in an entry: function, source, device, versions."""
    try:
        _, meta = src.manifest(digest)
        entry = parse_meta(meta)
    except StoreError:
        return None
    if not isinstance(entry, EntryMeta):
        return None
    return {
        "function": entry.source.qualname,
        "file": entry.source.file,
        "line": entry.source.line,
        "device": entry.device_type,
        "torch": entry.torch,
        "triton": entry.triton,
        "env": None if entry.env is None else entry.env.to_json(),
        "backends": len(entry.backends),
    }


@dataclass(frozen=True)
class Entry:
    ref: str
    digest: str
    function: str | None


def entries(src: Source) -> list[Entry]:
    """Every shared ref (not the host-local ones) with its function, if it is an entry."""
    store: Any = src.store if src.store is not None else src.bundle
    out = []
    for name in paths.shared_refs(store.refs()):
        digest = store.get_ref(name)
        if digest is None:
            continue  # removed since listed
        info = entry_info(src, digest)
        out.append(Entry(name, str(digest), None if info is None else info["function"]))
    return out


def _function_matches(function: str | None, query: str) -> bool:
    return function is not None and (function == query or function.endswith("." + query))


def _ambiguous(query: str, found: list[Entry]) -> UsageError:
    named = [f"{e.ref} ({e.function or e.digest[:12]})" for e in found[:_SHOWN]]
    more = f" and {len(found) - _SHOWN} more" if len(found) > _SHOWN else ""
    return UsageError(f"{query!r} is ambiguous: it names {', '.join(named)}{more}")


def find(src: Source, query: str) -> list[Entry]:
    """The entries `query` names: a ref; the refs of one digest (by a prefix of
    at least 4 hex digits); or the refs of one function, every compiled
    variant of it. Raises UsageError when nothing matches, or when the query
    could mean several digests (a prefix) or several functions (a name)."""
    store: Any = src.store if src.store is not None else src.bundle
    digest = store.get_ref(query)
    if digest is not None:
        return [Entry(query, str(digest), None)]
    listed = entries(src)
    if len(query) >= MIN_PREFIX and _HEX.fullmatch(query):
        found = [e for e in listed if e.digest.startswith(query)]
        if len({e.digest for e in found}) > 1:
            raise _ambiguous(query, found)
        if found:
            return found
    found = [e for e in listed if _function_matches(e.function, query)]
    if len({e.function for e in found}) > 1:
        raise _ambiguous(query, found)
    if not found:
        raise UsageError(f"no ref, digest or function named {query!r}")
    return found


def resolve(src: Source, query: str) -> str:
    """The one digest `query` names: any object's full digest, or an entry as `find` names it."""
    store: Any = src.store if src.store is not None else src.bundle
    if re.fullmatch(r"[0-9a-f]{64}", query) and store.contains(query):
        return query
    found = find(src, query)
    if len({e.digest for e in found}) > 1:
        raise _ambiguous(query, found)
    if not store.contains(found[0].digest):
        raise UsageError(f"the object {found[0].digest} of {query!r} is not in {src.path}")
    return found[0].digest
