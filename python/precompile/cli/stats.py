"""`precompile stats`: where the store is, what it holds, and how well it served.

The byte figures, each defined once (docs/FORMAT.md, "Sizes"):

- stored bytes: every object file in the store;
- referenced bytes: the objects some ref reaches;
- reclaimable bytes: stored minus referenced, what `gc` frees once the
  grace period has passed;
- a ref's size (`ls`, `du`): the objects it reaches; its unique bytes: those
  no other ref reaches, what deleting it frees.

The counts (hits, misses by reason, saves) are summed over every process
that used the store since the last `--zero` (see `run_stats`).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from .. import miss_log, paths, run_stats
from .console import emit_json, esc, out, print_table
from .views import Source, human_size

__all__ = ["cmd_stats", "usage_figures"]


def usage_figures(u: dict[str, Any]) -> dict[str, Any]:
    """The byte figures of `Store.usage()` (as a dict) under their one meaning each."""
    referenced = u["reachable_bytes"]
    return {
        "stored_bytes": u["bytes"],
        "referenced_bytes": referenced,
        "reclaimable_bytes": u["bytes"] - referenced,
        "shared_bytes": referenced - sum(r["unique_bytes"] for r in u["refs"]),
    }


def _counts(src: Source) -> dict[str, Any]:
    totals: dict[str, int] = {}
    since = None
    if src.store is not None:
        totals, since = run_stats.read_totals(src.path)
    misses = {k.removeprefix("miss_"): v for k, v in sorted(totals.items()) if k.startswith("miss_") and v}
    hits = totals.get("hits", 0)
    calls = hits + sum(misses.values())
    return {
        "hits": hits,
        "misses": sum(misses.values()),
        "misses_by_reason": misses,
        "hit_rate": hits / calls if calls else None,
        "saves": totals.get("saves", 0),
        "load_errors": misses.get("load_error", 0),
        # Compiles of functions the store held under another key or
        # environment (see `explain`), in all and by the factor that differed.
        "frames_invalidated": totals.get("frames_invalidated", 0),
        "invalidated_by_factor": {
            k.removeprefix("invalidated_"): v for k, v in sorted(totals.items()) if k.startswith("invalidated_") and v
        },
        "counted_since": since,
    }


def cmd_stats(args: argparse.Namespace, src: Source) -> int:
    if getattr(args, "zero", False):
        run_stats.zero(src.need_store("stats --zero").path)
        if args.json:
            emit_json({"zeroed": True})
        else:
            out.print("counts zeroed")
        return 0
    u = src.usage()
    refs = [r for r in u["refs"] if not paths.is_host_local(r["name"])]
    figures = usage_figures(u)
    largest = sorted(refs, key=lambda r: r["bytes"], reverse=True)[:5]
    referenced = figures["referenced_bytes"]
    doc = {
        "store": os.path.abspath(src.path),
        "entries": len(refs),
        "blobs": u["objects"],
        "bytes": u["logical_bytes"],
        **figures,
        "dedup_ratio": u["logical_bytes"] / referenced if referenced else 1.0,
        **_counts(src),
        "largest": [{k: r[k] for k in ("name", "bytes", "unique_bytes")} for r in largest],
    }
    if args.json:
        emit_json(doc)
        return 0
    # The path on a line of its own: a table cell would cut a long one short.
    out.print(f"store {esc(doc['store'])}", soft_wrap=True)
    rate = "-" if doc["hit_rate"] is None else f"{100 * doc['hit_rate']:.1f}%"
    rows: list[tuple[object, ...]] = [
        ("entries", doc["entries"]),
        ("objects", doc["blobs"]),
        ("stored bytes", human_size(doc["stored_bytes"])),
        ("referenced bytes", human_size(referenced)),
        ("reclaimable bytes", f"{human_size(doc['reclaimable_bytes'])} (precompile gc)"),
        ("entries in full", f"{human_size(doc['bytes'])} (dedup {doc['dedup_ratio']:.2f}x)"),
        ("hits", doc["hits"]),
        ("misses", doc["misses"]),
        *((f"  {reason}", n) for reason, n in doc["misses_by_reason"].items()),
        ("hit rate", rate),
        ("saves", doc["saves"]),
        ("load errors", doc["load_errors"]),
    ]

    if doc["counted_since"] is not None:
        rows.append(("counted since", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(doc["counted_since"]))))
    print_table(("", ""), rows, header=False)
    for line in miss_log.invalidated_lines({"": doc["frames_invalidated"], **doc["invalidated_by_factor"]}):
        out.print(esc(line), soft_wrap=True)
    if largest and out.is_terminal:
        top = [(r["name"], human_size(r["bytes"]), human_size(r["unique_bytes"])) for r in largest]
        print_table(("largest entries", "size", "unique"), top)
    return 0
