"""The commands that look at entries: ls, show, stats and du."""

from __future__ import annotations

import argparse
import os
from typing import Any

from rich.markup import escape
from rich.table import Table

from .. import paths
from .._core import FormatError, StoreError
from ..schema import EntryMeta, parse_meta
from .console import emit_json, out
from .views import Source, human_age, human_size

__all__ = ["cmd_du", "cmd_ls", "cmd_show", "cmd_stats"]


def _entry_info(src: Source, digest: str) -> dict[str, Any] | None:
    """What a person looks for in an entry: function, source, device, versions."""
    try:
        _, meta = src.manifest(digest)
        entry = parse_meta(meta)
    except StoreError:
        return None
    if not isinstance(entry, EntryMeta):
        return None
    return {
        "function": entry.source.qualname,
        "file": entry.source.file,
        "line": entry.source.line,
        "device": entry.device_type,
        "torch": entry.torch,
        "triton": entry.triton,
        "env": None if entry.env is None else entry.env.to_json(),
        "backends": len(entry.backends),
    }


def _where(info: dict[str, Any] | None) -> str:
    if info is None or not info["file"]:
        return ""
    return f"{os.path.basename(info['file'])}:{info['line']}"


def cmd_ls(args: argparse.Namespace, src: Source) -> int:
    refs = [
        r
        for r in src.usage()["refs"]
        if r["name"].startswith(args.prefix)
        and (paths.is_host_local(args.prefix) or not paths.is_host_local(r["name"]))
    ]
    for r in refs:
        r["entry"] = _entry_info(src, r["digest"])
    if args.json:
        emit_json(refs)
        return 0
    table = Table(
        "ref",
        "function",
        "source",
        "device",
        "torch",
        "objects",
        "size",
        "unique",
        "last used",
        box=None,
    )
    for r in refs:
        info = r["entry"] or {}
        table.add_row(
            escape(r["name"]),
            escape(info.get("function") or ""),
            escape(_where(r["entry"])),
            info.get("device") or "",
            info.get("torch") or "",
            str(r["objects"]),
            human_size(r["bytes"]),
            human_size(r["unique_bytes"]),
            human_age(r["mtime"]),
        )
    out.print(table if refs else "no refs")
    return 0


# Deeper levels are indented no further (their depth is printed instead), so a
# chain thousands of manifests deep still prints one short line per node.
_MAX_INDENT = 24


def _walk(src: Source, root: str) -> tuple[dict[str, dict[str, Any]], list[tuple[int, str, bool]]]:
    """Depth-first from `root`, without recursion, reading each object once.

    Returns every node by digest (in the order first reached) and the lines
    to print: (depth, digest, repeat), where a repeat is a node that another
    path reached first; it is printed but not expanded again, so manifests
    shared many times over (a diamond) cost one visit each, not one per path.
    """
    nodes: dict[str, dict[str, Any]] = {}
    lines: list[tuple[int, str, bool]] = []
    stack = [(root, 0)]
    while stack:
        digest, depth = stack.pop()
        if digest in nodes:
            lines.append((depth, digest, True))
            continue
        size, is_manifest = src.node(digest)
        node: dict[str, Any] = {"digest": digest, "bytes": size}
        nodes[digest] = node
        lines.append((depth, digest, False))
        if is_manifest:
            try:
                children, meta = src.manifest(digest)
            except FormatError:
                continue  # starts like a manifest but is not one: a plain blob
            node["meta"] = meta
            node["children"] = children
            stack.extend((child, depth + 1) for child in reversed(children))
    return nodes, lines


def _label(node: dict[str, Any], repeat: bool) -> str:
    head = f"{node['digest'][:12]}  {human_size(node['bytes'])}"
    if repeat:
        return f"[dim]{'manifest' if 'children' in node else 'blob'}  {head}  (shown above)[/]"
    if "children" not in node:
        return f"[dim]blob[/]  {head}"
    scalars = [f"{k}={v}" for k, v in node["meta"].items() if isinstance(v, (str, int, float, bool))]
    meta = "  ".join(s if len(s) <= 48 else s[:45] + "..." for s in scalars[:4])
    return f"[bold]manifest[/]  {head}  [cyan]{escape(meta)}[/]"


def cmd_show(args: argparse.Namespace, src: Source) -> int:
    digest = src.resolve(args.ref)
    nodes, lines = _walk(src, digest)
    total = sum(node["bytes"] for node in nodes.values())
    if args.json:
        # A flat list, each node once: nesting would repeat shared nodes and
        # nest as deep as the manifests do.
        doc = {
            "ref": args.ref,
            "root": digest,
            "entry": _entry_info(src, digest),
            "objects": len(nodes),
            "total_bytes": total,
            "nodes": list(nodes.values()),
        }
        emit_json(doc)
        return 0
    text = [f"[bold]{escape(args.ref)}[/]  {len(nodes)} objects, {human_size(total)}"]
    info = _entry_info(src, digest)
    if info is not None:
        versions = f"torch {info['torch']}" + (f", triton {info['triton']}" if info["triton"] else "")
        text.append(
            f"  {escape(info['function'] or '?')}  {escape(info['file'] or '?')}:{info['line']}  "
            f"{info['device']}, {versions}, {info['backends']} backends"
        )
    for depth, d, repeat in lines:
        indent = "  " * min(depth + 1, _MAX_INDENT)
        marker = f"[dim]{depth}>[/] " if depth + 1 > _MAX_INDENT else ""
        text.append(f"{indent}{marker}{_label(nodes[d], repeat)}")
    out.print("\n".join(text), soft_wrap=True)
    return 0


def cmd_stats(args: argparse.Namespace, src: Source) -> int:
    u = src.usage()
    hits, misses = src.counters()
    reachable = u["reachable_bytes"]
    largest = sorted(u["refs"], key=lambda r: r["bytes"], reverse=True)[:5]
    doc = {
        "entries": len(u["refs"]),
        "blobs": u["objects"],
        "bytes": u["logical_bytes"],
        "unique_bytes": reachable,
        "stored_bytes": u["bytes"],
        "unreferenced_bytes": u["bytes"] - reachable,
        "dedup_ratio": u["logical_bytes"] / reachable if reachable else 1.0,
        "hits": hits,
        "misses": misses,
        "largest": [{k: r[k] for k in ("name", "bytes", "unique_bytes")} for r in largest],
    }
    if args.json:
        emit_json(doc)
        return 0
    table = Table(title=escape(src.path), show_header=False, box=None)
    table.add_row("entries", str(doc["entries"]))
    table.add_row("blobs", str(doc["blobs"]))
    table.add_row("bytes (entries in full)", human_size(doc["bytes"]))
    table.add_row("unique bytes", human_size(reachable))
    table.add_row("dedup ratio", f"{doc['dedup_ratio']:.2f}x")
    table.add_row("stored bytes", human_size(doc["stored_bytes"]))
    table.add_row("unreferenced bytes", human_size(doc["unreferenced_bytes"]))
    table.add_row("hits / misses since open", f"{hits} / {misses}")
    out.print(table)
    if largest:
        top = Table("largest entries", "size", "unique", box=None)
        for r in largest:
            top.add_row(escape(r["name"]), human_size(r["bytes"]), human_size(r["unique_bytes"]))
        out.print(top)
    return 0


def cmd_du(args: argparse.Namespace, src: Source) -> int:
    u = src.usage()
    refs = sorted(u["refs"], key=lambda r: (-r["unique_bytes"], -r["bytes"], r["name"]))
    doc = {
        "refs": [{k: r[k] for k in ("name", "bytes", "unique_bytes")} for r in refs],
        "stored_bytes": u["bytes"],
        "unique_bytes": u["reachable_bytes"],
        "unreferenced_bytes": u["bytes"] - u["reachable_bytes"],
    }
    if args.json:
        emit_json(doc)
        return 0
    table = Table("unique", "size", "share", "ref", box=None)
    total = u["bytes"] or 1
    for r in refs:
        share = f"{100 * r['unique_bytes'] / total:.1f}%"
        table.add_row(human_size(r["unique_bytes"]), human_size(r["bytes"]), share, escape(r["name"]))
    table.add_row(human_size(doc["unreferenced_bytes"]), "", "", "[dim](unreferenced)[/]")
    table.add_row(human_size(u["bytes"]), "", "", "[bold]total[/]")
    out.print(table)
    return 0
