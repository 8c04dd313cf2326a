"""The commands that remove entries: rm (by name) and prune (by last use).

Removing an entry removes its ref; the objects only it reached stay until a
garbage collection (`gc`, which `prune` runs itself) sweeps them, so a
process loading the entry at that moment still finds every object.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from .. import paths
from .console import emit_json, esc, out
from .selection import find
from .views import Source, UsageError, human_size

__all__ = ["cmd_prune", "cmd_rm"]


def cmd_rm(args: argparse.Namespace, src: Source) -> int:
    store = src.need_store("rm")
    if args.all == bool(args.refs):
        raise UsageError("rm takes refs, digest prefixes or function names, or --all (not both)")
    if args.all:
        names = paths.shared_refs(store.refs())
    else:
        names = []
        for query in args.refs:
            names += [e.ref for e in find(src, query) if e.ref not in names]
    removed = names if args.dry_run else [n for n in names if store.delete_ref(n)]
    if args.json:
        emit_json({"removed": removed, "dry_run": args.dry_run})
        return 0
    verb = "would remove" if args.dry_run else "removed"
    for name in removed:
        out.print(f"{verb} {esc(name)}")
    if removed and not args.dry_run:
        out.print("their objects go at the next `precompile gc` or `precompile prune`", style="dim")
    return 0


def cmd_prune(args: argparse.Namespace, src: Source) -> int:
    store = src.need_store("prune")
    cutoff = time.time() - args.older_than
    stale = []
    for name in paths.shared_refs(store.refs()):
        used = store.ref_mtime(name)
        if used is not None and used < cutoff:
            stale.append(name)
    if args.dry_run:
        # What a collection would free depends on the refs being gone first.
        doc: dict[str, Any] = {"removed": stale, "dry_run": True}
    else:
        removed = [n for n in stale if store.delete_ref(n)]
        doc = {**store.gc(grace_seconds=args.grace).to_dict(), "removed": removed}
    if args.json:
        emit_json(doc)
        return 0
    verb = "would remove" if args.dry_run else "removed"
    out.print(f"{verb} {len(doc['removed'])} entries unused for {args.older_than:g}s or more")
    for name in doc["removed"]:
        out.print(f"  {esc(name)}")
    if not args.dry_run:
        out.print(
            f"freed {doc['objects_freed']} objects ({human_size(doc['bytes_freed'])}), kept {doc['objects_kept']}"
        )
    return 0
