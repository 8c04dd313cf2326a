"""Why a warm start compiled: misses and loads, where a user can see them.

Every event also goes three ways:

- counters: `counters["precompile"]` gets `frames_loaded` (compiled variants
  installed from the store; an install torch then fails takes its count
  back), `frames_recompiled` (frames Dynamo compiled although the store had
  installed code for them; not those past `recompile_limit`, which run
  eagerly), `frames_invalidated` (frames compiled although
  the store held the function, for another environment, key or source:
  `env_mismatch`, `key_mismatch`, `source_changed`) and `miss_<reason>`;
- logging: the `precompile` logger at INFO, and torch's `recompiles` log
  (`TORCH_LOGS=recompiles`) for every miss of a stored entry;
- a record file, `<store>/log/last-run.jsonl` (see `miss_log`), that
  `precompile explain` prints.

The first miss of a stored entry in a process also raises one
`PrecompileWarning` that names it and points at the rest.

Reasons: `not_stored` (no entry under the function's key, as on a first run),
`wait_timeout` (another process of the host was compiling the function, and
did not store it within the single-flight timeout),
`untrusted` (the remote held an entry whose ref no trusted key signed),
`env_mismatch` (entries under the function's key exist in the store or its
read-only layers, but only for other environments: the detail names each
factor that differs, such as
`torch 2.11.0+cu128 stored, 2.15.0 here`),
`key_mismatch` (the store holds an entry for this function, by module and
qualified name, under another key: `factors` names what differs, `source`
(its code was edited), `line` (lines above it changed), `file` (another
checkout), then any environment factor; see `candidates` for the bounded
lookup),
`load_error` (the entry is unreadable: corrupt or missing objects, another
torch), `source_changed` (a function it traced was edited since),
`bypassed` (torch saved the code without compiled variants), `module_missing`,
`missing_backend`, `unresolved_global` (its generated code
names a global nothing binds), `guards_unreadable` (the guard state does not
unpickle under this torch), `install_failed`, `guard_failed` (the code
was installed, but its guards rejected the call, so Dynamo compiled), and
`unstorable` (Dynamo compiled a frame whose code no path from a module
reaches, such as a function `exec` made in a namespace of its own, or a
module compiled inside DistributedDataParallel under DDPOptimizer, for which
torch records no entry: it is compiled in every process).
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable
from typing import Any

from . import _torch as tc
from . import candidates, entries
from .miss_log import INVALIDATED, MissLog, invalidation_factors
from .protocols import ReadStore
from .run_stats import RunStats
from .warning import PrecompileWarning

__all__ = ["begin", "end", "install_failed", "loaded", "miss", "not_stored", "unstorable"]

log = logging.getLogger("precompile")

_MAX_TEXT = 400  # per guard or detail string
_MAX_GUARDS = 8  # failed guards kept per compiled variant
# Reasons that mean "nothing was stored", not "what was stored went unused".
_QUIET = frozenset({"not_stored"})


_run = MissLog()
# Counts kept in the store across processes (`precompile stats`).
counts = RunStats()
_warned = threading.Lock()
_warned_once: list[bool] = []
# Compiled variants counted as loaded, by key, until an install undoes them.
_loaded_variants: dict[str, int] = {}
# The entry refs of other environments, by key: listed once per
# installation, on the first miss, from the local store and read-only layers.
_others: dict[int, dict[str, list[tuple[str | None, str]]]] = {}


def begin(store_path: Any) -> None:
    """Start recording this process's events under `store_path` (None: no file).

    Each installation gets its one warning: a process installs once.
    """
    _run.begin(store_path, tc.TORCH_VERSION)
    counts.begin(store_path)
    with _warned:
        _warned_once.clear()
        _loaded_variants.clear()
        _others.clear()
    tc.stored_code_watch.watch(_on_stored_code_compile)


def end() -> None:
    tc.stored_code_watch.stop()
    counts.flush()
    _run.end()


def _frame(fn: Callable[..., Any] | None) -> dict[str, Any]:
    if fn is None:
        return {}
    try:
        target = tc.innermost_fn(fn)
        code = target.__code__
    except (AttributeError, TypeError):
        return {}
    # The qualified name survives functools.wraps; the code's name may be
    # a decorator's `wrapper`.
    name = getattr(target, "__qualname__", code.co_name)
    if name != code.co_name:
        name = f"{name} ({code.co_name})"
    return {"frame": name, "file": f"{code.co_filename}:{code.co_firstlineno}"}


def _named(record: dict[str, Any], key: str) -> str:
    """How a log line names what it is about: the function, where it is
    defined, and the entry's key (`precompile show dynamo/<key>`)."""
    parts = [record["frame"]] if record.get("frame") else []
    if record.get("file"):
        parts.append(f"at {record['file']}")
    if key:
        parts.append(f"(key {key[:16]})")
    return " ".join(parts) or "?"


def _write(record: dict[str, Any]) -> None:
    _run.write(record)


def _short(text: str) -> str:
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 3] + "..."


def miss(
    reason: str,
    key: str,
    detail: str,
    *,
    fn: Callable[..., Any] | None = None,
    guards: list[str] | None = None,
    frame: dict[str, Any] | None = None,
    factors: list[str] | None = None,
) -> None:
    """Record that the store did not serve `key` for `reason`."""
    tc.counters["precompile"][f"miss_{reason}"] += 1
    counts.add(f"miss_{reason}")
    if reason == "source_changed" and not factors:
        factors = ["source"]
    if reason in INVALIDATED:
        tc.counters["precompile"]["frames_invalidated"] += 1
        counts.add("frames_invalidated")
        for factor in invalidation_factors(factors or []):
            counts.add(f"invalidated_{factor}")
    record: dict[str, Any] = {
        "event": "miss",
        "reason": reason,
        "key": key,
        **(frame if frame is not None else _frame(fn)),
        "detail": _short(detail),
    }
    if guards:
        record["guards"] = [_short(g) for g in guards[:_MAX_GUARDS]]
    if factors:
        record["factors"] = factors
    _write(record)
    text = f"precompile miss ({reason}) for {_named(record, key)}: {detail}"
    if reason in _QUIET:
        log.info(text)
        return
    log.info(text)
    tc.recompiles_log().debug(text)
    with _warned:
        first = not _warned_once
        _warned_once.append(True)
    if first:
        store = _run.store_path()
        where = f" --store {store}" if store else ""
        warnings.warn(
            PrecompileWarning(
                f"{text}. Later misses in this process are only logged: see "
                f"`precompile explain{where}`, or run with TORCH_LOGS=recompiles"
            ),
            stacklevel=4,
        )


def _other_entries(store: ReadStore, key: str) -> list[tuple[str | None, str]]:
    with _warned:
        index = _others.get(id(store))
    if index is None:
        index = {}
        names = {n for layer in candidates.local_layers(store) for n in layer.refs(entries.REF_PREFIX)}
        for name in sorted(names):
            parsed = entries.parse_ref(name)
            if parsed is not None:
                index.setdefault(parsed[1], []).append((parsed[0], name))
        with _warned:
            _others[id(store)] = index
    mine = set(entries.lookup_refs(key, start_devices=False))
    return [(env, name) for env, name in index.get(key, []) if name not in mine]


def _differences(store: ReadStore, env_id: str | None, name: str) -> list[tuple[str, str]]:
    """How the entry `name` (of environment `env_id`) differs from here."""
    if env_id is None:
        return [("environment", "an entry filed before entries named their environment (never loaded)")]
    digest = store.get_ref(name)
    meta = entries.read_entry_meta(store, digest) if digest is not None else None
    if meta is None or meta.env is None:
        return [("environment", f"environment {env_id} stored")]
    return candidates.env_differences(meta.env, meta.device_type) or [("environment", f"environment {env_id} stored")]


def not_stored(store: ReadStore, key: str, *, fn: Callable[..., Any] | None = None) -> None:
    """Record that no entry for `key` loads here: `env_mismatch`, naming the
    factors that differ, where other environments hold entries under this
    key; `key_mismatch`, naming the factors, where the store holds an entry
    for this function under another key (see `candidates`); else
    `not_stored`. Never raises: the lookups are for the record only."""
    factors: dict[str, str] = {}
    try:
        for env_id, name in _other_entries(store, key):
            for field, text in _differences(store, env_id, name):
                factors.setdefault(field, text)
    except Exception:
        log.debug("listing other environments' entries for %s failed", key, exc_info=True)
    if factors:
        miss(
            "env_mismatch",
            key,
            "stored only for other environments: " + "; ".join(factors.values()),
            fn=fn,
            factors=sorted(factors),
        )
        return
    found: list[tuple[str, str]] = []
    try:
        here = entries.key_parts_of(fn) if fn is not None else None
        found = candidates.key_differences(store, key, here) if here is not None else []
    except Exception:
        log.debug("looking up other entries of the function of %s failed", key, exc_info=True)
    if not found:
        miss("not_stored", key, "no entry under this function's key", fn=fn)
        return
    miss(
        "key_mismatch",
        key,
        "; ".join(text for _, text in found),
        fn=fn,
        factors=[field for field, _ in found],
    )


def loaded(key: str, entry: Any, *, fn: Callable[..., Any] | None = None) -> None:
    """Record that `entry` was installed for `key`."""
    variants = tc.loaded_variant_count(entry.dynamo)
    tc.counters["precompile"]["frames_loaded"] += variants
    tc.counters["precompile"]["entries_loaded"] += 1
    counts.add("hits")
    with _warned:
        _loaded_variants[key] = variants
    record = {"event": "loaded", "key": key, **_frame(fn), "variants": variants}
    _write(record)
    log.info("precompile loaded %d compiled variant(s) for %s", variants, _named(record, key))
    for code in entry.dynamo.codes:
        if code.bypassed:
            miss(
                "bypassed",
                key,
                f"{entry.dynamo.fn_name}: a code was stored without compiled variants "
                "(at save, torch bypassed it: a guard it cannot serialize, such as "
                "an identity check on an object or on a local class, or a backend never recorded); it compiles again",
                fn=fn,
            )


def install_failed(key: str, detail: str, *, fn: Callable[..., Any] | None = None) -> None:
    """Record that torch could not install the entry `loaded` reported for `key`.

    What `loaded` counted is taken back: nothing of the entry runs.
    """
    with _warned:
        variants = _loaded_variants.pop(key, None)
    if variants is not None:
        tc.counters["precompile"]["frames_loaded"] -= variants
        tc.counters["precompile"]["entries_loaded"] -= 1
        counts.add("hits", -1)
    miss("install_failed", key, detail, fn=fn)


def _code_frame(code: Any) -> dict[str, Any]:
    return {"frame": code.co_name, "file": f"{code.co_filename}:{code.co_firstlineno}"}


def unstorable(code: Any, error: BaseException) -> None:
    """Record that Dynamo compiled a frame torch's package cannot name."""
    frame = _code_frame(code)
    miss(
        "unstorable",
        "",
        f"{frame['frame']} at {frame['file']}: Dynamo compiled a frame torch's package cannot name "
        f"({error}); it runs compiled but is not stored, so every process compiles it",
        frame=frame,
    )


def _on_stored_code_compile(code: Any, f_locals: dict[str, Any], managers: list[Any], past_limit: str | None) -> None:
    # Dynamo is compiling a frame the store installed code for: every stored
    # variant's guards rejected this call. Say which, on these very locals.
    # Past the recompile limit Dynamo runs the frame eagerly instead, as the
    # compiling process did: a miss, but nothing compiled.
    if past_limit is None:
        tc.counters["precompile"]["frames_recompiled"] += 1
    failed: list[str] = []
    for i, manager in enumerate(managers):
        for part in tc.guard_failures(manager, f_locals)[:2]:
            failed.append(f"variant {i}: {part}")
    frame = _code_frame(code)
    detail = f"{frame['frame']} at {frame['file']}: stored guards rejected the call" + (
        f" ({failed[0]})" if failed else ""
    )
    if past_limit is not None:
        detail += f"; its variants reach {past_limit}, so it runs eagerly"
    miss("guard_failed", "", detail, guards=failed, frame=frame)
