"""The record file of one run's loads and misses: `<store>/log/last-run.jsonl`.

One JSON object per line. A process that records anything first writes a
`run` record (pid, time, argv, torch version), then `loaded` records (an
entry installed: its key, frame, number of compiled variants) and `miss`
records (`reason`, `key`, `frame`, `file`, `detail`, and for a guard failure
the failed `guards`). Every record carries the writer's `pid`. Lines are
appended with one `write` each under `O_APPEND`, so concurrent processes
interleave whole lines; the file is set aside as `last-run.jsonl.1` when a
run starts and finds it over `MAX_LOG_BYTES`, and one process writes at most
`MAX_RECORDS` records. Torch-free: `precompile explain` reads it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

__all__ = [
    "LOG_NAME",
    "MAX_LOG_BYTES",
    "MAX_RECORDS",
    "INVALIDATED",
    "MissLog",
    "invalidated_lines",
    "invalidation_factors",
    "read_records",
    "summary_lines",
]

LOG_NAME = os.path.join("log", "last-run.jsonl")
MAX_LOG_BYTES = 1 << 20
MAX_RECORDS = 1000


class MissLog:
    """This process's writer; `path` None keeps no file."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.path: str | None = None
        self.written = 0
        self.started = False

    def begin(self, store_path: str | os.PathLike[str] | None, torch_version: str) -> None:
        with self.lock:
            self.path = os.path.join(os.fspath(store_path), LOG_NAME) if store_path else None
            self.written = 0
            self.started = False
            self.torch_version = torch_version

    def end(self) -> None:
        with self.lock:
            self.path = None

    def store_path(self) -> str | None:
        path = self.path
        return os.path.dirname(os.path.dirname(path)) if path else None

    def write(self, record: dict[str, Any]) -> None:
        with self.lock:
            path = self.path
            if path is None or self.written >= MAX_RECORDS:
                return
            lines = [record]
            try:
                if not self.started:
                    self.started = True
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    if os.path.exists(path) and os.path.getsize(path) > MAX_LOG_BYTES:
                        os.replace(path, path + ".1")
                    header = {
                        "event": "run",
                        "time": time.time(),
                        "argv": sys.argv[:8],
                        "torch": self.torch_version,
                    }
                    lines.insert(0, header)
                text = "".join(json.dumps({**r, "pid": os.getpid()}) + "\n" for r in lines)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                try:
                    os.write(fd, text.encode())
                finally:
                    os.close(fd)
                self.written += len(lines)
            except OSError:
                # A read-only store still loads; it just keeps no record.
                self.path = None


def read_records(store_path: str, *, all_runs: bool = False) -> list[dict[str, Any]]:
    """The records of the last run (or of every run kept) under `store_path`.

    Raises FileNotFoundError when no run has recorded anything there.
    """
    records = []
    with open(os.path.join(store_path, LOG_NAME), encoding="utf-8") as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except ValueError:
                continue  # a line cut short by a crash
    if all_runs:
        return records
    starts = [i for i, r in enumerate(records) if r.get("event") == "run"]
    if not starts:
        return records
    pid = records[starts[-1]].get("pid")
    return [r for r in records[starts[-1] :] if r.get("pid") == pid]


def summary_lines(records: list[dict[str, Any]]) -> list[str]:
    """Human-readable lines: one per miss and per load, then the totals."""
    lines = []
    loaded = variants = 0
    reasons: dict[str, int] = {}
    # A load that torch then failed to install counts as the miss alone.
    loaded_keys: dict[tuple[Any, Any], int] = {}
    for r in records:
        event = r.get("event")
        where = r.get("frame") or (r.get("key") or "?")[:16]
        if r.get("file"):
            where += f" ({r['file']})"
        if event == "run":
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.get("time", 0)))
            lines.append(f"run pid {r.get('pid')} at {stamp}, torch {r.get('torch')}: {' '.join(r.get('argv', []))}")
        elif event == "loaded":
            loaded += 1
            variants += int(r.get("variants", 0))
            loaded_keys[(r.get("pid"), r.get("key"))] = int(r.get("variants", 0))
            lines.append(f"  loaded  {where}: {r.get('variants')} compiled variant(s)")
        elif event == "miss":
            reason = str(r.get("reason"))
            reasons[reason] = reasons.get(reason, 0) + 1
            undone = loaded_keys.pop((r.get("pid"), r.get("key")), None) if reason == "install_failed" else None
            if undone is not None:
                loaded -= 1
                variants -= undone
            lines.append(f"  MISS    {reason}: {where}")
            lines.append(f"          {r.get('detail', '')}")
            for g in r.get("guards", []):
                lines.append(f"          failed guard: {g}")
    total = ", ".join(f"{n} {k}" for k, n in sorted(reasons.items())) or "none"
    lines.append(f"entries loaded: {loaded} ({variants} compiled variants); misses: {total}")
    lost: dict[str, int] = {}
    for r in records:
        if r.get("event") == "miss" and r.get("reason") in INVALIDATED:
            factors = invalidation_factors([str(f) for f in r.get("factors") or ["source"]])
            for factor in factors:
                lost[factor] = lost.get(factor, 0) + 1
            lost[""] = lost.get("", 0) + 1
    return lines + invalidated_lines(lost)


# Misses of a function the store held, compiled only because a factor of its
# key differed (see `explain`): compiles lost to invalidation.
INVALIDATED = frozenset({"env_mismatch", "key_mismatch", "source_changed"})

# Each factor of a key, as "the store held it for ...".
_HELD_FOR = {
    "torch": "another torch build",
    "torch_git": "another torch build of its version",
    "python": "another Python",
    "triton": "another Triton",
    "cpu": "another CPU ISA",
    "accelerator": "another accelerator",
    "environment": "another environment",
    "source": "other source",
    "line": "another line of its file",
    "file": "another source file path",
    "lineage": "another torch.compile wrapper",
}


def invalidation_factors(factors: list[str]) -> list[str]:
    """The factors a lost compile is counted under: a torch version change
    implies its build, an edit of the function its moved lines, and the
    source file's path is no part of torch's key (it only says where the
    function now is) unless nothing else differs."""
    out = [f for f in factors if f in _HELD_FOR]
    if "torch" in out and "torch_git" in out:
        out.remove("torch_git")
    if "source" in out and "line" in out:
        out.remove("line")
    if "file" in out and len(out) > 1:
        out.remove("file")
    return out or ["environment"]


def invalidated_lines(lost: dict[str, int]) -> list[str]:
    """`N frames compiled that the store held for another torch build`, from
    counts by factor (key "": the frames in all)."""
    total = lost.get("", 0)
    if not total:
        return []
    noun = "frame" if total == 1 else "frames"
    held = {f: n for f, n in sorted(lost.items()) if f in _HELD_FOR}
    if len(held) == 1:
        return [f"{total} {noun} compiled that the store held for {_HELD_FOR[next(iter(held))]}"]
    by = ", ".join(f"{n} for {_HELD_FOR[f]}" for f, n in held.items())
    return [f"{total} {noun} compiled that the store held under another key or environment: {by}"]
