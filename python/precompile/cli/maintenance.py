"""The commands that check, trim and move a store: verify, gc, export, import and keygen."""

from __future__ import annotations

import argparse
import contextlib
from typing import Any

from .. import paths
from .._core import StoreError, keygen, public_key
from .console import emit_json, err, esc, out
from .views import ByteProgress, Source, UsageError, human_size

__all__ = ["cmd_export", "cmd_gc", "cmd_import", "cmd_keygen", "cmd_pubkey", "cmd_verify"]


def cmd_verify(args: argparse.Namespace, src: Source) -> int:
    if getattr(args, "repair", False):
        return _repair(args, src)
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
        emit_json(doc)
    elif doc["ok"]:
        out.print(f"[green]ok[/]: {doc['objects']} objects, {human_size(doc['bytes'])} verified")
        if src.bundle is not None:
            out.print(f"signed by {doc['signer']}" if doc["signer"] else "not signed", soft_wrap=True)
    else:
        holders = doc.get("holders", {})

        def held(d: str) -> str:
            names = holders.get(d, [])
            return f" (reached by {esc(', '.join(names))})" if names else " (no ref reaches it)"

        for d in doc["corrupt"]:
            out.print(f"[red]corrupt[/] {d}{held(d) if src.store is not None else ''}", soft_wrap=True)
        for d in doc["missing"]:
            out.print(f"[red]missing[/] {d}{held(d)}", soft_wrap=True)
        for d in doc.get("unknown", []):
            out.print(f"[red]unknown manifest version[/] {d}{held(d)}", soft_wrap=True)
        out.print(f"{len(doc['corrupt'])} corrupt, {len(doc['missing'])} missing of {doc['objects']} objects")
    return 0 if doc["ok"] else 1


def _repair(args: argparse.Namespace, src: Source) -> int:
    from ..repair import repair

    store = src.need_store("verify --repair")
    report = repair(store, layers=args.layer or (), remote=args.remote, trusted_keys=args.trusted_key)
    if args.json:
        emit_json(report.to_dict())
    else:
        for d in report.refetched:
            out.print(f"[green]fetched again[/] {d}")
        for name, digests in report.dropped.items():
            out.print(f"[red]dropped ref[/] {esc(name)}: {', '.join(digests)}", soft_wrap=True)
        out.print(esc(report.summary()), soft_wrap=True)
    return 0 if report.ok else 1


def cmd_gc(args: argparse.Namespace, src: Source) -> int:
    store = src.need_store("gc")
    status = err.status("collecting garbage") if err.is_terminal else contextlib.nullcontext()
    doc: dict[str, Any]
    with status:
        if args.max_size is not None:
            doc = store.evict(args.max_size, dry_run=args.dry_run, grace_seconds=args.grace).to_dict()
        else:
            doc = store.gc(dry_run=args.dry_run, grace_seconds=args.grace).to_dict()
    # Eviction deletes only refs whose deletion frees bytes; what stays above
    # the cap is held by the grace period, and no deletion could shrink it.
    met = args.max_size is None or doc["bytes_after"] <= args.max_size
    if args.max_size is not None:
        doc["max_size"] = args.max_size
        doc["target_met"] = met
    if args.json:
        emit_json(doc)
        return 0 if met else 1
    verb = "would free" if args.dry_run else "freed"
    if args.max_size is not None:
        evicted = doc["refs_evicted"]
        out.print(f"{'would evict' if args.dry_run else 'evicted'} {len(evicted)} least recently used refs")
        for name in evicted:
            out.print(f"  {esc(name)}")
    out.print(f"{verb} {doc['objects_freed']} objects ({human_size(doc['bytes_freed'])}), kept {doc['objects_kept']}")
    if args.max_size is not None:
        out.print(f"store: {human_size(doc['bytes_before'])} -> {human_size(doc['bytes_after'])}")
    if not met:
        err.print(
            f"precompile: error: the store cannot shrink to {human_size(args.max_size)}: "
            f"{human_size(doc['bytes_after'])} is objects written within the grace period "
            f"({args.grace:g}s) and what they reach, which no eviction frees; run gc again once they are "
            "older, or pass --grace 0 when nothing is writing to the store",
            soft_wrap=True,
        )
        return 1
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
        emit_json(doc)
    else:
        signed = ", signed" if args.sign else ""
        out.print(
            f"wrote {esc(args.out)}: {doc['refs']} refs, {doc['blobs']} blobs, {human_size(doc['bytes'])}{signed}"
        )
    return 0


def cmd_import(args: argparse.Namespace, src: Source) -> int:
    store = src.need_store("import")
    with ByteProgress(err, "importing") as bar:
        doc = store.import_bundle(
            args.bundle, progress=bar, trusted_keys=args.trusted_key, allow_unsigned=args.allow_unsigned or None
        ).to_dict()
    if args.json:
        emit_json(doc)
    else:
        out.print(
            f"imported {doc['refs']} refs ({doc['refs_changed']} new or changed): "
            f"{doc['objects_new']} new objects ({human_size(doc['bytes_new'])}), "
            f"{doc['objects_present']} already present"
        )
    return 0


def cmd_keygen(args: argparse.Namespace) -> int:
    try:
        public = keygen(args.keyfile)
    except FileExistsError:
        raise StoreError(f"{args.keyfile} already exists: keygen never overwrites a key file") from None
    if args.json:
        emit_json({"keyfile": args.keyfile, "public_key": public})
    else:
        print(public)
    return 0


def cmd_pubkey(args: argparse.Namespace) -> int:
    """The public key of a secret key file: what `--trusted-key` takes."""
    public = public_key(args.keyfile)
    if args.json:
        emit_json({"keyfile": args.keyfile, "public_key": public})
    else:
        print(public)
    return 0
