"""One entry per lineage: wrappers of one function with equal backends record into one entry, not the last one's.

Two `torch.compile` wrappers of one function with an equal backend (two model
instances of one class, each compiled; `generate()` compiling a model's
`forward` once per model) share Dynamo's in-process cache: the code object
holds every variant either compiled, and each wrapper's calls are served by
all of them. Each wrapper still records only its own package, under the one
key of their shared lineage (`lineages`), and torch keeps the last package
recorded under a key: the saved entry lacks the other wrappers' variants, and
a later process recompiles them.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import torch._dynamo
import torch._dynamo.package as dynamo_package
from torch._dynamo.precompile_context import PrecompileContext

from .patch import _Patch


class _SharedLineageEntries(_Patch):
    """Wrappers of one lineage record one entry: the variants of all of them, not the last compiled one's.

    While installed, recording a package under its lineage key records the
    union of what every package recorded under that key since Dynamo's code
    caches were last reset holds (`merge_entries`), in the order the packages
    were first recorded. A package whose wrapper is gone keeps its variants in
    the union, as its variants stay in Dynamo's in-process cache. After
    `torch._dynamo.reset()` (or `reset_code_caches()`), which empties that
    cache, or `PrecompileContext.clear()`, which drops what was recorded,
    recording starts over, as torch's does.

    Torch versions: 2.11 and newer record one package per key.
    Steps aside: where `torch._dynamo` has no `reset_code_caches` or
    `PrecompileContext` no `clear` to follow, recording is torch's: the last
    package's entry.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        # key -> the entries recorded under it, oldest package first: a live
        # package's reference and its latest entry; the entries of packages
        # gone are folded into one, with no reference.
        self._recorded: dict[str, list[tuple[weakref.ref[Any] | None, Any]]] = {}

    def _apply(self) -> None:
        reset_code_caches = vars(torch._dynamo).get("reset_code_caches")
        clear = vars(PrecompileContext).get("clear")
        if not callable(reset_code_caches) or not isinstance(clear, classmethod):
            return
        hook = self

        def reset_code_caches_and_records() -> None:
            reset_code_caches()
            hook._forget()

        def clear_and_records(cls: Any) -> None:
            clear.__func__(cls)
            hook._forget()

        reset_code_caches_and_records.__doc__ = reset_code_caches.__doc__
        # `reset()` calls `reset_code_caches` through the module's globals.
        self._replace(torch._dynamo, "reset_code_caches", reset_code_caches_and_records)
        self._replace(PrecompileContext, "clear", classmethod(clear_and_records))

    def entry(self, package: Any, key: str) -> Any:
        """The entry to record for `package` under `key`: its own, with the
        variants of the other packages recorded under `key` added."""
        own = package.cache_entry()
        if not self.active:
            return own
        with self._lock:
            recorded = self._recorded.setdefault(key, [])
            for i, (ref, _) in enumerate(recorded):
                if ref is not None and ref() is package:
                    recorded[i] = (ref, own)
                    break
            else:
                recorded.append((weakref.ref(package), own))
            # The entries of packages gone are folded into one, kept first:
            # the list stays as long as the live wrappers, however many came
            # and went.
            gone = [entry for ref, entry in recorded if ref is None or ref() is None]
            live = [(ref, entry) for ref, entry in recorded if ref is not None and ref() is not None]
            if len(gone) > 1:
                gone = [merge_entries(gone)]
            recorded[:] = [*((None, entry) for entry in gone), *live]
            entries = [entry for _, entry in recorded]
        return own if len(entries) == 1 else merge_entries(entries)

    def _forget(self) -> None:
        with self._lock:
            self._recorded.clear()

    def _stopped(self) -> None:
        self._forget()


shared_lineage_entries = _SharedLineageEntries()


def merge_entries(entries: Sequence[Any]) -> Any:
    """One `_DynamoCacheEntry` holding the codes and variants of `entries`.

    A code object (named by module, function names and path, as torch finds
    it at load) appears once, with the variants of every entry holding it,
    earlier entries' first, each distinct variant once. The entries are not
    changed: merged codes are copies.
    """
    first = entries[0]
    codes: dict[tuple[Any, ...], Any] = {}
    for entry in entries:
        for code in entry.codes:
            name = (code.python_module, tuple(code.function_names), code.code_source)
            held = codes.get(name)
            codes[name] = code if held is None else _merge_code(held, code)
    inlined = set().union(*(entry.source_info.inlined_sources for entry in entries))
    return dataclasses.replace(
        first,
        codes=list(codes.values()),
        source_info=dataclasses.replace(first.source_info, inlined_sources=inlined),
        device_type=_merged_device_type(entry.device_type for entry in entries),
    )


def _merge_code(held: Any, more: Any) -> Any:
    # A code whose compiles were all bypassed has nothing installable: where
    # the other entry has variants of it, only those count.
    held_bypassed = getattr(held, "bypassed", False)
    more_bypassed = getattr(more, "bypassed", False)
    if held_bypassed and not more_bypassed:
        guarded = list(more.guarded_codes)
    elif more_bypassed and not held_bypassed:
        guarded = list(held.guarded_codes)
    else:
        guarded = _distinct([*held.guarded_codes, *more.guarded_codes])
    changes: dict[str, Any] = {
        "guarded_codes": guarded,
        "import_sources": {**held.import_sources, **more.import_sources},
        "backend_ids": list(dict.fromkeys([*held.backend_ids, *more.backend_ids])),
    }
    fields = {field.name for field in dataclasses.fields(held)}
    if "has_compile_id" in fields:
        changes["has_compile_id"] = held.has_compile_id or more.has_compile_id
    if "bypassed" in fields:
        changes["bypassed"] = held_bypassed and more_bypassed
    return dataclasses.replace(held, **changes)


def _distinct(guarded_codes: list[Any]) -> list[Any]:
    """Each variant once: a package loaded from the store and then compiling
    more holds the stored variants, as every other wrapper that loaded them
    does."""
    kept: list[Any] = []
    by_guards: dict[bytes, list[Any]] = {}
    for guarded in guarded_codes:
        same_guards = by_guards.setdefault(guarded.guards_state, [])
        if any(other is guarded or other.dynamo_code == guarded.dynamo_code for other in same_guards):
            continue
        same_guards.append(guarded)
        kept.append(guarded)
    return kept


def _merged_device_type(device_types: Iterable[str]) -> str:
    types = list(dict.fromkeys(device_types))
    collapse = getattr(dynamo_package, "_collapse_device_types", None)
    if callable(collapse):
        return str(collapse(frozenset(types)))
    # torch 2.11 records one device type per package: an accelerator wins over cpu.
    return next((t for t in types if t != "cpu"), "cpu")
