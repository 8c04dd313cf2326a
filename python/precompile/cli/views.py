"""What the command line reads: a store or a bundle file behind one interface,
plus size/duration parsing and formatting. Kept apart from the commands so
that they read as what they do.
"""

from __future__ import annotations

import argparse
import os
import re
import time
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from .._core import Bundle, Store, open_bundle
from ..remote.manifest import MANIFEST_MAGIC
from .console import clean

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


class UsageError(Exception):
    """A bad invocation: the command line exits with status 2."""


# Sizes and durations past these are typing mistakes, and past 2**63 bytes
# or about 10**11 years they would not fit the store's integer types.
MAX_SIZE = 1 << 62
MAX_DURATION = 1000 * 365 * 86400.0


def parse_size(text: str) -> int:
    """`10G`, `500M`, `1.5GiB`, `4096`: K, M, G, T and P are powers of 1024."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([KMGTP]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"invalid size {text!r} (try 10G, 500M or a byte count)")
    size = float(m.group(1)) * _UNITS[m.group(2).upper()]
    if size > MAX_SIZE:
        raise argparse.ArgumentTypeError(f"size {text!r} is too large (at most 4096P)")
    return int(size)


def parse_duration(text: str) -> float:
    """`3600`, `90s`, `10m`, `1h`, `2d`."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([smhd]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r} (try 30s, 10m, 1h or seconds)")
    seconds = float(m.group(1)) * _SECONDS[m.group(2)]
    if seconds > MAX_DURATION:
        raise argparse.ArgumentTypeError(f"duration {text!r} is too long (at most 1000 years)")
    return seconds


def human_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def human_age(mtime: float | None) -> str:
    if mtime is None:
        return "-"
    age = max(0.0, time.time() - mtime)
    if age < 60:
        return f"{age:.0f}s ago"
    if age < 3600:
        return f"{age / 60:.0f}m ago"
    if age < 86400:
        return f"{age / 3600:.0f}h ago"
    return f"{age / 86400:.0f}d ago"


class ByteProgress:
    """A progress bar in bytes on stderr, for the binding's `progress=` hook.

    It appears only on a terminal and only once the operation has run for a
    moment, so quick operations print nothing extra.
    """

    DELAY = 0.3

    def __init__(self, console: Console, description: str) -> None:
        self.console = console
        self.description = description
        self.start = time.monotonic()
        self.bar: Progress | None = None
        self.task: Any = None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            if not self.console.is_terminal or time.monotonic() - self.start < self.DELAY:
                return
            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                *self.columns(),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task(self.description, total=total or None)
        self.bar.update(self.task, completed=done, total=total or None)

    def columns(self) -> list[Any]:
        """What counts progress: bytes done and their rate."""
        return [DownloadColumn(binary_units=True), TransferSpeedColumn()]

    def __enter__(self) -> ByteProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


class Source:
    """A store directory or a bundle file, read through the same questions."""

    def __init__(self, path: str, *, create: bool = False, shared: bool = False) -> None:
        self.path = path
        self.store: Store | None = None
        self.bundle: Bundle | None = None
        if os.path.isfile(path):
            # Inspection reads every blob at most once; verify explicitly.
            self.bundle = open_bundle(path, verify=False)
            return
        if not create and not os.path.isdir(path):
            raise UsageError(f"no store or bundle at {clean(path)}")
        try:
            self.store = Store(path, create=create, shared=shared)
        except FileNotFoundError:
            # One rule for a path that does not exist and a directory that is
            # not a store: both are a wrong --store, a bad invocation.
            if create:
                raise
            raise UsageError(f"no store or bundle at {clean(path)}") from None

    def need_store(self, command: str) -> Store:
        if self.store is None:
            raise UsageError(f"{command} needs a store directory; {self.path} is a bundle file")
        return self.store

    def node(self, digest: str) -> tuple[int, bool]:
        """(size, is_manifest) without hashing the blob."""
        if self.store is not None:
            # Through the store: a FIFO or link at the path is refused, not opened.
            return self.store.size(digest), self.store.is_manifest(digest)
        assert self.bundle is not None
        view = memoryview(self.bundle.get(digest))
        return len(view), view[: len(MANIFEST_MAGIC)] == MANIFEST_MAGIC

    def manifest(self, digest: str) -> tuple[list[str], dict[str, Any]]:
        src: Any = self.store if self.store is not None else self.bundle
        children, meta = src.get_manifest(digest)
        return children, meta

    def usage(self) -> dict[str, Any]:
        """`Store.usage()`, or the same numbers worked out for a bundle."""
        if self.store is not None:
            return self.store.usage().to_dict()
        b = self.bundle
        assert b is not None
        closures = {name: b.closure(str(b.get_ref(name))) for name in b.refs()}
        holders: dict[str, int] = {}
        for closure in closures.values():
            for d in closure:
                holders[d] = holders.get(d, 0) + 1
        size = {d: b.size(d) for d in b.digests()}
        refs = [
            {
                "name": name,
                "digest": closure[0],
                "mtime": None,
                "objects": len(closure),
                "bytes": sum(size[d] for d in closure),
                "unique_bytes": sum(size[d] for d in closure if holders[d] == 1),
                "missing": 0,
            }
            for name, closure in closures.items()
        ]
        return {
            "refs": refs,
            "objects": len(size),
            "bytes": sum(size.values()),
            "reachable_bytes": sum(size[d] for d in holders),
            "logical_bytes": sum(r["bytes"] for r in refs),
        }

    def counters(self) -> tuple[int, int]:
        """(hits, misses) of blob reads through this handle since it was opened."""
        src: Any = self.store if self.store is not None else self.bundle
        stats = src.stats()
        return int(stats.gets), int(stats.misses)
