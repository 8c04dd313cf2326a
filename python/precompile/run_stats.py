"""Hits, misses and saves, counted across every process that used a store.

Each process counts what the store did for it (`hits`: entries loaded and
installed; `miss_<reason>`: calls the store did not serve, by reason, see
`explain`; `saves`: entries written) and, after each `save()` and at exit,
writes what it counted since its last write to a file of its own,
`<store>/stats/<host>-<pid>-<ns>.json`, by writing a temporary file and
renaming it: a crash loses at most the counts since the last write, and
concurrent processes never write the same file, so none loses another's
counts. `precompile stats` sums `stats/total.json` and those files, and folds
them into `total.json` under `stats/.lock` (a crash there at worst leaves
files that `total.json` names as merged; the next fold deletes them unread).
`precompile stats --zero` deletes them all. Torch-free: the CLI reads it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["STATS_DIR", "RunStats", "read_totals", "zero"]

STATS_DIR = "stats"
_TOTAL = "total.json"
_LOCK = ".lock"


class RunStats:
    """This process's counts not yet written, and the store they go to."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, int] = {}
        self._dir: str | None = None

    def begin(self, store_path: str | os.PathLike[str] | None) -> None:
        with self._lock:
            self._dir = os.path.join(os.fspath(store_path), STATS_DIR) if store_path else None
            self._pending.clear()

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._pending[name] = self._pending.get(name, 0) + n

    def flush(self) -> None:
        """Write the counts since the last flush to a new file; a read-only store keeps none."""
        with self._lock:
            counts = {k: v for k, v in self._pending.items() if v}
            directory = self._dir
            self._pending.clear()
        if not counts or directory is None:
            return
        name = f"{socket.gethostname()}-{os.getpid()}-{time.time_ns()}.json"
        try:
            os.makedirs(directory, exist_ok=True)
            _write_json(os.path.join(directory, name), {"counts": counts, "time": time.time()})
        except OSError:
            pass


def _write_json(path: str, doc: dict[str, Any]) -> None:
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _counts(doc: dict[str, Any] | None) -> dict[str, int]:
    raw = (doc or {}).get("counts", {})
    if not isinstance(raw, dict):
        return {}
    return {str(k): int(v) for k, v in raw.items() if isinstance(v, int)}


@contextlib.contextmanager
def _locked(directory: str) -> Iterator[None]:
    fd = os.open(os.path.join(directory, _LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _process_files(directory: str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith(".json") and n != _TOTAL and not n.startswith("."))


def read_totals(store_path: str | os.PathLike[str], *, compact: bool = True) -> tuple[dict[str, int], float | None]:
    """Counts summed over every process that wrote to `store_path`, and when
    they were last zeroed (None: never). With `compact`, the per-process files
    are folded into one where the store is writable."""
    directory = os.path.join(os.fspath(store_path), STATS_DIR)
    if not os.path.isdir(directory):
        return {}, None
    try:
        with _locked(directory):
            return _fold(directory, compact)
    except OSError:  # a read-only store: sum without folding
        return _fold(directory, False)


def _fold(directory: str, compact: bool) -> tuple[dict[str, int], float | None]:
    total_doc = _read_json(os.path.join(directory, _TOTAL)) or {}
    totals = _counts(total_doc)
    merged_before = set(total_doc.get("merged", []))
    since = total_doc.get("since")
    names = _process_files(directory)
    fresh = [n for n in names if n not in merged_before]
    for name in fresh:
        for k, v in _counts(_read_json(os.path.join(directory, name))).items():
            totals[k] = totals.get(k, 0) + v
    if compact and names:
        # `merged` lists the files this total covers, so a crash before the
        # deletes below cannot count them twice; the next fold replaces it.
        doc = {"counts": totals, "since": since, "merged": names}
        with contextlib.suppress(OSError):
            _write_json(os.path.join(directory, _TOTAL), doc)
            for name in names:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(directory, name))
    return totals, since if isinstance(since, (int, float)) else None


def zero(store_path: str | os.PathLike[str]) -> None:
    """Forget every count recorded in `store_path`."""
    directory = os.path.join(os.fspath(store_path), STATS_DIR)
    os.makedirs(directory, exist_ok=True)
    with _locked(directory):
        for name in _process_files(directory):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(directory, name))
        _write_json(os.path.join(directory, _TOTAL), {"counts": {}, "since": time.time(), "merged": []})
