"""Why a warm start compiled: misses and loads, where a user can see them.

Every event also goes three ways:

- counters: `counters["precompile"]` gets `frames_loaded` (compiled variants
  installed from the store), `frames_recompiled` (frames Dynamo compiled
  although the store had installed code for them) and `miss_<reason>`;
- logging: the `precompile` logger at INFO, and torch's `recompiles` log
  (`TORCH_LOGS=recompiles`) for every miss of a stored entry;
- a record file, `<store>/log/last-run.jsonl`, one JSON object per line, that
  `precompile explain` prints. Each process starts its run with a `run`
  record; the file is replaced when it passes `MAX_LOG_BYTES`, and a process
  writes at most `MAX_RECORDS` records.

The first miss of a stored entry in a process also raises one
`PrecompileWarning` that names it and points at the rest.

Reasons: `not_stored` (no entry under the function's key, as on a first run),
`load_error` (the entry is unreadable: corrupt or missing objects, another
torch), `module_missing`, `missing_backend`, `guards_unreadable` (the guard
state does not unpickle under this torch), `incompatible` (torch's version or
source checks refused it), `install_failed`, and `guard_failed` (the code
was installed, but its guards rejected the call, so Dynamo compiled).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from . import _torch_compat as tc
from .context import PrecompileWarning

__all__ = ["LOG_NAME", "MAX_LOG_BYTES", "MAX_RECORDS", "begin", "end", "loaded", "miss", "read_records"]

log = logging.getLogger("precompile")

LOG_NAME = os.path.join("log", "last-run.jsonl")
MAX_LOG_BYTES = 1 << 20
MAX_RECORDS = 1000
_MAX_TEXT = 400  # per guard or detail string
_MAX_GUARDS = 8  # failed guards kept per compiled variant
# Reasons that mean "nothing was stored", not "what was stored went unused".
_QUIET = frozenset({"not_stored"})


class _Run:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.path: str | None = None
        self.written = 0
        self.warned = False
        self.started = False


_run = _Run()


def begin(store_path: str | None) -> None:
    """Start recording this process's events under `store_path` (None: no file)."""
    with _run.lock:
        _run.path = os.path.join(store_path, LOG_NAME) if store_path else None
        _run.written = 0
        _run.started = False
    tc.stored_code_watch.start(_on_stored_code_compile)


def end() -> None:
    tc.stored_code_watch.stop()
    with _run.lock:
        _run.path = None


def _frame(fn: Callable[..., Any] | None) -> dict[str, Any]:
    if fn is None:
        return {}
    try:
        code = tc.innermost_fn(fn).__code__
    except Exception:
        return {}
    return {"frame": code.co_name, "file": f"{code.co_filename}:{code.co_firstlineno}"}


def _write(record: dict[str, Any]) -> None:
    with _run.lock:
        path = _run.path
        if path is None or _run.written >= MAX_RECORDS:
            return
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if not _run.started:
                _run.started = True
                if os.path.exists(path) and os.path.getsize(path) > MAX_LOG_BYTES:
                    os.replace(path, path + ".1")
                header = {"event": "run", "pid": os.getpid(), "time": time.time(),
                          "argv": sys.argv[:8], "torch": tc.TORCH_VERSION}
                lines = [header, record]
            else:
                lines = [record]
            text = "".join(json.dumps({**r, "pid": os.getpid()}) + "\n" for r in lines)
            # One write per call under O_APPEND: lines of concurrent processes
            # interleave whole, never mixed.
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, text.encode())
            finally:
                os.close(fd)
            _run.written += len(lines)
        except OSError:
            # A read-only store still loads; it just keeps no record.
            _run.path = None


def _short(text: str) -> str:
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 3] + "..."


def miss(reason: str, key: str, detail: str, *, fn: Callable[..., Any] | None = None,
         guards: list[str] | None = None, frame: dict[str, Any] | None = None) -> None:
    """Record that the store did not serve `key` for `reason`."""
    tc.counters["precompile"][f"miss_{reason}"] += 1
    record: dict[str, Any] = {"event": "miss", "reason": reason, "key": key,
                              **(frame if frame is not None else _frame(fn)),
                              "detail": _short(detail)}
    if guards:
        record["guards"] = [_short(g) for g in guards[:_MAX_GUARDS]]
    _write(record)
    text = f"precompile miss ({reason}) for {record.get('frame', key[:16])}: {detail}"
    if reason in _QUIET:
        log.info(text)
        return
    log.info(text)
    tc.recompiles_log().debug(text)
    with _run.lock:
        first = not _run.warned
        _run.warned = True
    if first:
        where = f" --store {os.path.dirname(os.path.dirname(_run.path))}" if _run.path else ""
        warnings.warn(
            PrecompileWarning(
                f"{text}. Later misses in this process are only logged: see "
                f"`precompile explain{where}`, or run with TORCH_LOGS=recompiles"
            ),
            stacklevel=4,
        )


def loaded(key: str, entry: Any, *, fn: Callable[..., Any] | None = None) -> None:
    """Record that `entry` was installed for `key`."""
    variants = sum(len(c.guarded_codes) for c in entry.dynamo.codes if not c.bypassed)
    tc.counters["precompile"]["frames_loaded"] += variants
    tc.counters["precompile"]["entries_loaded"] += 1
    _write({"event": "loaded", "key": key, **_frame(fn), "variants": variants})
    log.info("precompile loaded %d compiled variant(s) for %s", variants, key[:16])
    for code in entry.dynamo.codes:
        if code.bypassed:
            miss("missing_backend", key, f"{entry.dynamo.fn_name}: a code was stored without its "
                 "compiled graph (its backend was never recorded); it compiles again", fn=fn)


def _on_stored_code_compile(code: Any, f_locals: dict[str, Any], managers: list[Any]) -> None:
    # Dynamo is compiling a frame the store installed code for: every stored
    # variant's guards rejected this call. Say which, on these very locals.
    tc.counters["precompile"]["frames_recompiled"] += 1
    failed: list[str] = []
    for i, manager in enumerate(managers):
        for part in tc.guard_failures(manager, f_locals)[:2]:
            failed.append(f"variant {i}: {part}")
    where = f"{code.co_name} at {code.co_filename}:{code.co_firstlineno}"
    detail = f"{where}: stored guards rejected the call" + (f" ({failed[0]})" if failed else "")
    miss("guard_failed", "", detail, guards=failed,
         frame={"frame": code.co_name, "file": f"{code.co_filename}:{code.co_firstlineno}"})


def read_records(store_path: str, *, all_runs: bool = False) -> list[dict[str, Any]]:
    """The records of the last run (or of every run kept) under `store_path`."""
    path = os.path.join(store_path, LOG_NAME)
    records = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except ValueError:
                continue  # a line cut short by a crash
    if all_runs:
        return records
    runs = [r for r in records if r.get("event") == "run"]
    if not runs:
        return records
    last = runs[-1]
    start = records.index(last)
    return [r for r in records[start:] if r.get("pid") == last.get("pid")]
