"""Stitching PrecompileContext's records into store entries.

While torch compiles with `caching_precompile`, PrecompileContext collects
Dynamo entries (one per compiled function) and backend artifacts (one per
compiled graph). Saving stitches each Dynamo entry to the backends it names.
torch's own stitching serializes a backend once per entry that uses it and,
when a backend was never recorded, logs and quietly drops that code. Here
every backend is stored once by content. A training graph whose backward never
ran has no backend recorded (AOTAutograd records the graph when it compiles
the backward, on the first backward call): the save compiles that backward
first, so the graph is stored. A backend still missing is reported with a
warning and a counter.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

from ._core import StoreError
from ._torch import (
    PrecompileCacheEntry,
    bypass_reasons,
    bypassed_copy,
    compile_pending,
    counters,
    recorded_backends,
    recorded_entries,
)
from .entries import SaveMemo, entry_ref, put_entry
from .protocols import WriteStore
from .warning import PrecompileWarning

__all__ = [
    "PrecompileWarning",
    "SaveReport",
    "complete_backends",
    "create_cache_entries",
    "save_context",
    "stitch",
]


@dataclasses.dataclass(frozen=True)
class SaveReport:
    """What one save wrote: entry digests by key, and how backends deduplicated.

    `refs`: the ref each written entry is filed under, by key
    (`dynamo/<env-id>/<key>`)."""

    entries: dict[str, str]
    backends: int
    unique_backends: int
    missing_backends: int
    # Entries that could not be serialized (key -> why); the others are saved.
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)
    refs: dict[str, str] = dataclasses.field(default_factory=dict)


def stitch(dynamo_entry: Any) -> tuple[PrecompileCacheEntry, int]:
    """One Dynamo entry with the recorded backends it names.

    A backend PrecompileContext never recorded is reported (a
    PrecompileWarning and `counters["precompile"]["missing_backend"]`); its
    code is kept without compiled graphs, so Dynamo compiles that code when
    the entry is loaded, the outcome torch also chooses. The live entry is
    never changed: a bypassed code is marked on a copy. Returns the entry and
    how many backends were missing.
    """
    backends = recorded_backends()
    content: dict[Any, Any] = {}
    missing_total = 0
    bypass: set[int] = set()
    for index, code in enumerate(dynamo_entry.codes):
        missing = [bid for bid in code.backend_ids if bid not in backends]
        if missing:
            missing_total += len(missing)
            counters["precompile"]["missing_backend"] += len(missing)
            why = bypass_reasons.reason(missing[0])
            cause = "" if why is None else f" (AOTAutograd's cache bypassed its graph: {why})"
            warnings.warn(
                PrecompileWarning(
                    f"{dynamo_entry.fn_name}: backend {missing[0]} was never recorded{cause}; "
                    "this code will compile again when loaded"
                ),
                stacklevel=3,
            )
            bypass.add(index)
            continue
        for bid in code.backend_ids:
            content[bid] = backends[bid]
    entry = PrecompileCacheEntry(dynamo=bypassed_copy(dynamo_entry, bypass), backends=content)
    return entry, missing_total


def complete_backends(dynamo_entries: Any, *, at_exit: bool = False) -> None:
    """Have torch record the backends of graphs whose backward never ran.

    Each such backward is compiled now, as torch's first backward call would
    compile it (see `_torch.pending_backwards`). One that fails to compile
    is reported with a PrecompileWarning and
    `counters["precompile"]["backward_compile_failed"]`; its code is then
    saved as a missing backend's is. `at_exit`: the interpreter is exiting,
    and torch's compile workers are gone.
    """
    backends = recorded_backends()
    # A code torch bypassed (a guard it cannot serialize) loads without its graphs anyway.
    named = {
        bid: entry.fn_name
        for entry in dynamo_entries
        for code in entry.codes
        if not code.bypassed
        for bid in code.backend_ids
    }
    missing = set(named) - set(backends)
    _, failed = compile_pending(missing, in_process=at_exit)
    for failure in failed:
        counters["precompile"]["backward_compile_failed"] += 1
        warnings.warn(
            PrecompileWarning(
                f"{named[failure.backend_id]}: compiling the backward of backend {failure.backend_id} "
                f"for the save failed ({failure.reason}); it is saved without it"
            ),
            stacklevel=4,
        )


def create_cache_entries(*, at_exit: bool = False) -> tuple[dict[str, PrecompileCacheEntry], int]:
    """Stitch all of PrecompileContext's records; returns entries and missing count."""
    entries: dict[str, PrecompileCacheEntry] = {}
    missing_total = 0
    complete_backends(list(recorded_entries().values()), at_exit=at_exit)
    for key, dynamo_entry in recorded_entries().items():
        entries[key], missing = stitch(dynamo_entry)
        missing_total += missing
    return entries, missing_total


def save_context(
    store: WriteStore,
    on_written: Callable[[str, PrecompileCacheEntry], None] | None = None,
    *,
    at_exit: bool = False,
) -> SaveReport:
    """Write every entry PrecompileContext holds to `store`.

    `on_written(key, entry)` runs after each entry is stored. An entry that
    does not serialize (its compiled code holds an object pickle cannot
    carry) is skipped with a PrecompileWarning and counted
    (`counters["precompile"]["save_skipped"]`); the other entries are saved,
    and the skipped function compiles on the next start, as with no store.
    The store's own errors (disk full, permissions) are raised. `at_exit`:
    the save runs as the interpreter exits.
    """
    entries, missing = create_cache_entries(at_exit=at_exit)
    memo = SaveMemo()
    written = {}
    refs = {}
    skipped = {}
    for key, entry in entries.items():
        try:
            written[key] = put_entry(store, entry, key, memo)
            refs[key] = entry_ref(key, entry.dynamo.device_type)
        except StoreError:
            raise
        except Exception as e:
            skipped[key] = f"{type(e).__name__}: {e}"
            counters["precompile"]["save_skipped"] += 1
            warnings.warn(
                PrecompileWarning(
                    f"precompile entry for {getattr(entry.dynamo, 'fn_name', key)} was not saved: {skipped[key]}"
                ),
                stacklevel=3,
            )
            continue
        if on_written is not None:
            on_written(key, entry)
    n_backends = sum(len(e.backends) for e in entries.values())
    return SaveReport(
        entries=written,
        backends=n_backends,
        unique_backends=len(set(memo.backends.values())),
        missing_backends=missing,
        skipped=skipped,
        refs=refs,
    )
