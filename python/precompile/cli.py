"""The `precompile` command line: inspect, check, trim and move stores.

    precompile [--store PATH] COMMAND [--json] ...

COMMAND is one of ls, show, stats, verify, gc, export, import, du, keygen, explain,
push, pull (see `_cli_remote`; stats and gc also take `--remote URL`); `--store`
may also name a bundle file for the read-only commands. The read commands
take `--json` and then print one JSON document on stdout. Progress bars go
to stderr and only appear on a terminal.

Exit status: 0 when all is well; 1 when a problem was found (corrupt or
missing objects) or an operation failed; 2 for a bad invocation (unknown
command or option, no store at the path, unknown ref, bad size).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import paths
from ._cli_views import (
    ByteProgress,
    Source,
    UsageError,
    human_age,
    human_size,
    parse_duration,
    parse_size,
)
from ._core import FormatError, StoreError, __version__, keygen
from .schema import EntryMeta, parse_meta

__all__ = ["main"]

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def _emit_json(doc: Any) -> None:
    print(json.dumps(doc, indent=2, sort_keys=True))


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
        _emit_json(refs)
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
        _emit_json(doc)
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
        _emit_json(doc)
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


def _remote_commands() -> Any:
    from . import _cli_remote

    return _cli_remote


def cmd_verify(args: argparse.Namespace, src: Source) -> int:
    doc: dict[str, Any]
    with ByteProgress(err, "verifying") as bar:
        if src.store is not None:
            r = src.store.verify(progress=bar)
            doc = r.to_dict()
        else:
            assert src.bundle is not None
            b = src.bundle.verify(progress=bar)
            doc = {
                "ok": b.ok,
                "objects": b.blobs,
                "bytes": b.bytes,
                "corrupt": b.corrupt,
                "missing": [],
                "signer": src.bundle.signer,
            }
    if args.json:
        _emit_json(doc)
    elif doc["ok"]:
        out.print(f"[green]ok[/]: {doc['objects']} objects, {human_size(doc['bytes'])} verified")
        if src.bundle is not None:
            out.print(f"signed by {doc['signer']}" if doc["signer"] else "not signed", soft_wrap=True)
    else:
        for d in doc["corrupt"]:
            out.print(f"[red]corrupt[/] {d}")
        for d in doc["missing"]:
            out.print(f"[red]missing[/] {d}")
        for d in doc.get("unknown", []):
            out.print(f"[red]unknown manifest version[/] {d}")
        out.print(f"{len(doc['corrupt'])} corrupt, {len(doc['missing'])} missing of {doc['objects']} objects")
    return 0 if doc["ok"] else 1


def cmd_gc(args: argparse.Namespace, src: Source) -> int:
    store = src.need_store("gc")
    status = err.status("collecting garbage") if err.is_terminal else contextlib.nullcontext()
    doc: dict[str, Any]
    with status:
        if args.max_size is not None:
            doc = store.evict(args.max_size, dry_run=args.dry_run, grace_seconds=args.grace).to_dict()
        else:
            doc = store.gc(dry_run=args.dry_run, grace_seconds=args.grace).to_dict()
    if args.json:
        _emit_json(doc)
        return 0
    verb = "would free" if args.dry_run else "freed"
    if args.max_size is not None:
        evicted = doc["refs_evicted"]
        out.print(f"{'would evict' if args.dry_run else 'evicted'} {len(evicted)} least recently used refs")
        for name in evicted:
            out.print(f"  {escape(name)}")
    out.print(f"{verb} {doc['objects_freed']} objects ({human_size(doc['bytes_freed'])}), kept {doc['objects_kept']}")
    if args.max_size is not None:
        out.print(f"store: {human_size(doc['bytes_before'])} -> {human_size(doc['bytes_after'])}")
    return 0


def cmd_export(args: argparse.Namespace, src: Source) -> int:
    store = src.need_store("export")
    for name in args.refs:
        if store.get_ref(name) is None:
            raise UsageError(f"no ref named {name!r}")
    with ByteProgress(err, "exporting") as bar:
        names = args.refs or paths.shared_refs(store.refs())
        doc: dict[str, Any] = store.export_bundle(names, args.out, progress=bar, sign_with=args.sign).to_dict()
    doc["path"] = args.out
    doc["signed"] = args.sign is not None
    if args.json:
        _emit_json(doc)
    else:
        signed = ", signed" if args.sign else ""
        out.print(
            f"wrote {escape(args.out)}: {doc['refs']} refs, {doc['blobs']} blobs, {human_size(doc['bytes'])}{signed}"
        )
    return 0


def cmd_import(args: argparse.Namespace, src: Source) -> int:
    store = src.need_store("import")
    with ByteProgress(err, "importing") as bar:
        doc = store.import_bundle(args.bundle, progress=bar, trusted_keys=args.trusted_key).to_dict()
    if args.json:
        _emit_json(doc)
    else:
        out.print(
            f"imported {doc['refs']} refs ({doc['refs_changed']} new or changed): "
            f"{doc['objects_new']} new objects ({human_size(doc['bytes_new'])}), "
            f"{doc['objects_present']} already present"
        )
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
        _emit_json(doc)
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


def cmd_keygen(args: argparse.Namespace) -> int:
    public = keygen(args.keyfile)
    if args.json:
        _emit_json({"keyfile": args.keyfile, "public_key": public})
    else:
        print(public)
    return 0


def cmd_demo(args: argparse.Namespace, src: Source) -> int:
    from .demo import run

    return run(str(src.path), out.print)


def cmd_explain(args: argparse.Namespace, src: Source) -> int:
    from .miss_log import LOG_NAME, read_records, summary_lines

    try:
        records = read_records(str(src.path), all_runs=args.all)
    except FileNotFoundError:
        raise UsageError(f"no run has recorded loads or misses in {src.path} ({LOG_NAME})") from None
    if args.json:
        _emit_json(records)
        return 0
    for line in summary_lines(records):
        out.print(escape(line), soft_wrap=True)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="precompile", description="Inspect, check, trim and move precompile stores and bundles."
    )
    parser.add_argument(
        "--store",
        metavar="PATH",
        help="store directory, or a bundle file for read commands "
        "(default: $PRECOMPILE_STORE, else $XDG_CACHE_HOME/precompile or ~/.cache/precompile)",
    )
    parser.add_argument("--version", action="version", version=f"precompile {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, func: Any, text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("--json", action="store_true", help="print JSON instead of text")
        p.set_defaults(func=func)
        return p

    command("ls", cmd_ls, "list refs with their sizes and last use").add_argument(
        "prefix", nargs="?", default="", help="only refs starting with this"
    )
    command("show", cmd_show, "print the manifest tree of a ref, with sizes").add_argument(
        "ref", help="a ref name or an object digest"
    )
    command("stats", cmd_stats, "entries, blobs, bytes, dedup and the largest entries").add_argument(
        "--remote", metavar="URL", help="report on this remote instead of the store"
    )
    command("verify", cmd_verify, "rehash every object (in parallel); exit 1 on problems")
    gc = command("gc", cmd_gc, "evict least recently used refs down to a size, then sweep")
    gc.add_argument("--dry-run", action="store_true", help="report what would go; change nothing")
    gc.add_argument(
        "--max-size",
        type=parse_size,
        metavar="SIZE",
        help="evict least recently used refs until the store fits (10G, 500M, ...)",
    )
    gc.add_argument(
        "--grace",
        type=parse_duration,
        default=3600.0,
        metavar="DURATION",
        help="keep unreferenced objects younger than this (default 1h; 0 when nothing writes)",
    )
    gc.add_argument("--remote", metavar="URL", help="collect this remote instead: delete what no remote ref reaches")
    export = command("export", cmd_export, "write refs and everything they reach to one bundle file")
    export.add_argument("out", help="the bundle file to write")
    export.add_argument("refs", nargs="*", help="refs to export (default: all)")
    export.add_argument("--sign", metavar="KEYFILE", help="sign the bundle with this secret key (see keygen)")
    imp = command("import", cmd_import, "unpack a bundle into the store (idempotent)")
    imp.add_argument("bundle", help="the bundle file to read")
    imp.add_argument(
        "--trusted-key",
        action="append",
        metavar="KEY",
        help="accept only a bundle signed by this public key or key file (repeatable; "
        "default: $PRECOMPILE_TRUSTED_KEYS)",
    )
    command("keygen", cmd_keygen, "write a new secret signing key (mode 0600) and print its public key").add_argument(
        "keyfile", help="where to write the secret key (never overwritten)"
    )
    command("du", cmd_du, "disk usage per ref: what deleting each would free")
    _remote_commands().add_commands(lambda name, func, text: command(name, lambda a, s: func(a, s, out, err), text))
    command(
        "explain", cmd_explain, "why the last run compiled: the store's loads and misses, with the failed guards"
    ).add_argument("--all", action="store_true", help="every run the record file keeps, not only the last")
    sub.add_parser(
        "demo",
        help="compile a model into the store, then warm-start it in a fresh process",
        description="compile a model into the store, then warm-start it in a fresh process "
        "with empty caches (needs torch)",
    ).set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "keygen":  # needs no store
            return cmd_keygen(args)
        if getattr(args, "remote", None) and args.command in ("stats", "gc"):
            remote = _remote_commands()
            run = remote.cmd_stats_remote if args.command == "stats" else remote.cmd_gc_remote
            return int(run(args, out))
        src = Source(args.store or paths.default_store_path(), create=args.command in ("import", "demo", "pull"))
        return int(args.func(args, src))
    except UsageError as e:
        err.print(f"precompile: error: {escape(str(e))}")
        return 2
    except KeyboardInterrupt:
        err.print("precompile: interrupted")
        return 130
    except (StoreError, OSError, ValueError) as e:
        err.print(f"precompile: error: {escape(str(e))}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
