"""Triton's C stub libraries, shipped with every entry saved where Triton built them.

Before Triton launches anything it builds small C extension modules with the
host's C compiler: the driver utilities (`cuda_utils`) and, where Triton's
own launcher is used, one launcher per kernel signature. It caches each in
its cache dir under `sha256(source + platform)`, so a host with an empty
cache pays a compiler run (tenths of a second each) before its first call.

A saving process records the stubs it has loaded (the shared objects it
maps from Triton's cache dir) and the entry carries them; a loading process
puts them back under the same key and file name through Triton's cache
manager before any kernel loads, so Triton finds them instead of compiling.
The key covers the stub's source and the platform, and the file name the
interpreter's extension suffix, so a host that would build a different stub
looks under another key and builds it as before.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from typing import Any

from . import _torch as tc
from .protocols import WriteStore

__all__ = ["loaded_stubs", "place", "put_stubs", "validate"]

log = logging.getLogger(__name__)

# Triton's cache keys: sha256 hex, or its base32 spelling.
_KEY = re.compile(r"^(?:[0-9a-f]{64}|[A-Z2-7]{52})$")
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,200}\.so$")


def validate(key: str, filename: str) -> tuple[str, str]:
    """Refuse a stored stub whose key or name could land outside its cache dir."""
    if not _KEY.match(key) or not _NAME.match(filename) or ".." in filename:
        raise ValueError(f"refusing stored Triton stub {key!r}/{filename!r}")
    return key, filename


def loaded_stubs() -> list[tuple[str, str, str]]:
    """(key, file name, path) of each library this process maps from Triton's cache dir."""
    if "triton" not in sys.modules:
        return []  # nothing built by Triton is loaded, and importing it costs a CPU save
    cache_dir = tc.triton_cache_dir()
    if cache_dir is None:
        return []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="surrogateescape") as f:
            maps = f.read()
    except OSError:
        return []
    root = os.path.realpath(cache_dir)
    found: dict[tuple[str, str], str] = {}
    for line in maps.splitlines():
        fields = line.split(None, 5)
        if len(fields) < 6 or not fields[5].startswith("/") or fields[5].endswith(" (deleted)"):
            continue
        path = fields[5]
        rel = os.path.relpath(path, root)
        key, _, filename = rel.partition(os.sep)
        if rel.startswith("..") or os.sep in filename:
            continue
        try:
            validate(key, filename)
        except ValueError:
            continue
        found[(key, filename)] = path
    return [(key, name, path) for (key, name), path in sorted(found.items())]


def put_stubs(store: WriteStore) -> tuple[tuple[str, str, str], ...]:
    """Store the stubs this process has loaded; (key, file name, digest) each."""
    return tuple((key, name, store.put_file(path)) for key, name, path in loaded_stubs())


def place(stubs: list[tuple[str, str, Any]]) -> int:
    """Put stored stubs into Triton's cache where missing; returns how many.

    A stub that cannot be placed (no Triton here, an unwritable cache) only
    means Triton builds it as it would have.
    """
    placed = 0
    for key, name, blob in stubs:
        try:
            placed += tc.put_triton_cache_file(key, name, blob)
        except Exception:
            log.debug("Triton stub %s/%s not placed", key, name, exc_info=True)
    if placed:
        tc.counters["precompile"]["triton_stubs_placed"] += placed
    return placed
