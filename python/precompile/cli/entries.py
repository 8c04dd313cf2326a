"""The commands that look at entries: ls, show and du (stats has its own module)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from .. import paths
from .._core import FormatError
from .console import emit_json, esc, out, print_table
from .roles import child_roles
from .selection import entry_info, resolve
from .stats import usage_figures
from .views import Source, human_age, human_size

__all__ = ["cmd_du", "cmd_ls", "cmd_show"]


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
        r["entry"] = entry_info(src, r["digest"])
    if args.json:
        emit_json(refs)
        return 0
    columns = ("ref", "function", "source", "device", "torch", "objects", "size", "unique", "last used")
    rows = []
    for r in refs:
        info = r["entry"] or {}
        rows.append(
            (
                r["name"],
                info.get("function") or "",
                _where(r["entry"]),
                info.get("device") or "",
                info.get("torch") or "",
                r["objects"],
                human_size(r["bytes"]),
                human_size(r["unique_bytes"]),
                human_age(r["mtime"]),
            )
        )
    if rows or not out.is_terminal:
        print_table(columns, rows)
    else:
        out.print("no refs")
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
    stack: list[tuple[str, int, str | None]] = [(root, 0, None)]
    while stack:
        digest, depth, role = stack.pop()
        if digest in nodes:
            lines.append((depth, digest, True))
            continue
        size, is_manifest = src.node(digest)
        node: dict[str, Any] = {"digest": digest, "bytes": size, "role": role}
        nodes[digest] = node
        lines.append((depth, digest, False))
        if is_manifest:
            try:
                children, meta = src.manifest(digest)
            except FormatError:
                continue  # starts like a manifest but is not one: a plain blob
            node["meta"] = meta
            node["children"] = children
            roles = child_roles(meta)
            stack.extend((child, depth + 1, roles.get(child)) for child in reversed(children))
    return nodes, lines


def _label(node: dict[str, Any], repeat: bool) -> str:
    head = f"{node['digest'][:12]}  {human_size(node['bytes'])}"
    role = f"  [green]{esc(node['role'])}[/]" if node["role"] else ""
    if repeat:
        return f"[dim]{'manifest' if 'children' in node else 'blob'}  {head}  (shown above)[/]"
    if "children" not in node:
        return f"[dim]blob[/]  {head}{role}"
    scalars = [f"{k}={v}" for k, v in node["meta"].items() if isinstance(v, (str, int, float, bool))]
    meta = "  ".join(s if len(s) <= 48 else s[:45] + "..." for s in scalars[:4])
    return f"[bold]manifest[/]  {head}{role}  [cyan]{esc(meta)}[/]"


def cmd_show(args: argparse.Namespace, src: Source) -> int:
    digest = resolve(src, args.ref)
    nodes, lines = _walk(src, digest)
    total = sum(node["bytes"] for node in nodes.values())
    if args.json:
        # A flat list, each node once: nesting would repeat shared nodes and
        # nest as deep as the manifests do.
        doc = {
            "ref": args.ref,
            "root": digest,
            "entry": entry_info(src, digest),
            "objects": len(nodes),
            "total_bytes": total,
            "nodes": list(nodes.values()),
        }
        emit_json(doc)
        return 0
    text = [f"[bold]{esc(args.ref)}[/]  {len(nodes)} objects, {human_size(total)}"]
    info = entry_info(src, digest)
    if info is not None:
        versions = f"torch {info['torch']}" + (f", triton {info['triton']}" if info["triton"] else "")
        text.append(
            f"  {esc(info['function'] or '?')}  {esc(info['file'] or '?')}:{info['line']}  "
            f"{esc(info['device'])}, {esc(versions)}, {info['backends']} backends"
        )
    for depth, d, repeat in lines:
        indent = "  " * min(depth + 1, _MAX_INDENT)
        marker = f"[dim]{depth}>[/] " if depth + 1 > _MAX_INDENT else ""
        text.append(f"{indent}{marker}{_label(nodes[d], repeat)}")
    out.print("\n".join(text), soft_wrap=True)
    return 0


def cmd_du(args: argparse.Namespace, src: Source) -> int:
    """Each ref's unique bytes (what deleting it frees), then the bytes several
    refs share and the unreferenced ones: the shares add up to the store."""
    u = src.usage()
    figures = usage_figures(u)
    refs = sorted(u["refs"], key=lambda r: (-r["unique_bytes"], -r["bytes"], r["name"]))
    doc = {
        "refs": [{k: r[k] for k in ("name", "bytes", "unique_bytes")} for r in refs],
        **figures,
        "unreferenced_bytes": figures["reclaimable_bytes"],
    }
    if args.json:
        emit_json(doc)
        return 0
    total = u["bytes"] or 1

    def share(n: int) -> str:
        return f"{100 * n / total:.1f}%"

    rows: list[tuple[object, ...]] = [
        (human_size(r["unique_bytes"]), human_size(r["bytes"]), share(r["unique_bytes"]), r["name"]) for r in refs
    ]
    rows.append((human_size(figures["shared_bytes"]), "", share(figures["shared_bytes"]), "(shared by several refs)"))
    rows.append((human_size(figures["reclaimable_bytes"]), "", share(figures["reclaimable_bytes"]), "(unreferenced)"))
    rows.append((human_size(u["bytes"]), "", "100.0%" if u["bytes"] else "", "(total)"))
    print_table(("unique", "size", "share", "ref"), rows)
    return 0
