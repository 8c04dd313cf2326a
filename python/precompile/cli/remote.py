"""The command line's remote commands: push, pull, and stats/gc with --remote.

    precompile --store S push [--sign KEYFILE] [REMOTE] [REF...]
    precompile --store S pull [--trusted-key KEY]... [--allow-unsigned] [REMOTE] [REF...]
    precompile ls --remote [REMOTE]
    precompile stats --remote [REMOTE]
    precompile gc --remote [REMOTE] [--grace 1h] [--dry-run]

REMOTE is a URL as `precompile.install(remote=...)` takes it; left out, it
is `$PRECOMPILE_REMOTE`, as for `install`. A URL that cannot name a remote
(unknown scheme or option) is a bad invocation (exit 2); a remote that
cannot be reached is an error (exit 1), not a miss: the command was asked
to move data and could not. URLs are printed with their password redacted.
A push signs every ref it sets (`--sign`, default `$PRECOMPILE_SIGNING_KEY`;
without a key it exits 2); a pull sets only refs a trusted key signed and
lists the others as untrusted.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Any

from rich.console import Console
from rich.progress import (
    MofNCompleteColumn,
)

from ..remote import Remote, open_remote, pull, push, redact_url, remote_gc, remote_usage
from ..remote.trust import SIGNING_KEY_ENV, resolve_signing_key
from .console import emit_json, esc, print_table
from .views import ByteProgress, Source, UsageError, human_size

__all__ = ["FROM_ENV", "add_commands", "cmd_gc_remote", "cmd_ls_remote", "cmd_stats_remote"]

# `--remote` given without a URL: take $PRECOMPILE_REMOTE.
FROM_ENV = ""
REMOTE_ENV = "PRECOMPILE_REMOTE"


def remote_url(given: str | None) -> str:
    url = given or os.environ.get(REMOTE_ENV, "")
    if not url:
        raise UsageError(f"no remote: give its URL or set ${REMOTE_ENV}")
    return url


def _open(url: str) -> Remote:
    try:
        # Building the handle reads only the URL: what fails here is the URL.
        remote = open_remote(url)
    except (ValueError, TypeError) as e:
        raise UsageError(f"bad remote URL {redact_url(url)}: {e}") from None
    assert remote is not None
    try:
        remote.ping()
    except TypeError as e:
        # redis-py passes unknown query options on to the connection, which
        # refuses them when it first connects.
        name = re.search(r"keyword argument '([^']+)'", str(e))
        option = repr(name.group(1)) if name else str(e)
        raise UsageError(f"bad remote URL {redact_url(url)}: unknown option {option}") from None
    return remote


def _split_remote(args: argparse.Namespace) -> None:
    """`push [REMOTE] [REF...]`: a first word with `://` is the remote's URL."""
    if args.remote is None and args.refs and "://" in args.refs[0]:
        args.remote = args.refs.pop(0)
    args.remote = remote_url(args.remote)


class CountProgress(ByteProgress):
    """A progress bar in refs on stderr, shown only on a terminal after a moment."""

    def columns(self) -> list[Any]:
        return [MofNCompleteColumn()]


def _report(args: argparse.Namespace, out: Console, err: Console, verb: str, doc: dict[str, Any]) -> int:
    doc["remote"] = redact_url(args.remote)
    failures: dict[str, str] = doc.get("failures", {})
    if args.json:
        emit_json(doc)
    else:
        out.print(
            f"{verb} {doc['refs']} refs: {doc['objects']} objects ({human_size(doc['bytes'])}) "
            f"moved, {doc['objects_present']} already there"
        )
    if failures:
        first, why = next(iter(failures.items()))
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        err.print(esc(f"precompile: error: {len(failures)} refs failed: {first}: {why}{more}"), soft_wrap=True)
        return 1
    return 0


def cmd_push(args: argparse.Namespace, src: Source, out: Console, err: Console) -> int:
    store = src.need_store("push")
    _split_remote(args)
    key = resolve_signing_key(args.sign)
    if key is None:
        raise UsageError(f"push needs a signing key: --sign KEYFILE or ${SIGNING_KEY_ENV} (see precompile keygen)")
    for name in args.refs:
        if store.get_ref(name) is None:
            raise UsageError(f"no ref named {name!r}")
    remote = _open(args.remote)
    with ByteProgress(err, "pushing") as bar:
        report = push(store, remote, args.refs or None, progress=bar, signing_key=key)
    return _report(args, out, err, "pushed", report.to_json())


def cmd_pull(args: argparse.Namespace, src: Source, out: Console, err: Console) -> int:
    store = src.need_store("pull")
    _split_remote(args)
    remote = _open(args.remote)
    if args.refs:
        held = remote.ref_digests(args.refs)
        unknown = [n for n, d in held.items() if d is None]
        if unknown:
            raise UsageError(f"the remote has no ref named {unknown[0]!r}")
    with CountProgress(err, "pulling") as bar:
        report = pull(
            store,
            remote,
            args.refs or None,
            progress=bar,
            trusted_keys=args.trusted_key,
            allow_unsigned=args.allow_unsigned or None,
        )
    for name in report.untrusted:
        err.print(f"skipped {esc(name)}: its signature does not verify under a trusted key")
    status = _report(args, out, err, "pulled", report.to_json())
    # Refs named on the command line that were refused are a failure; in a
    # pull of everything, refs other writers signed are skipped as expected.
    return 1 if args.refs and report.untrusted else status


def cmd_ls_remote(args: argparse.Namespace, out: Console) -> int:
    """The remote's refs and the digests they name (one scan, no object read)."""
    args.remote = remote_url(args.remote)
    remote = _open(args.remote)
    names = [n for n in remote.refs(args.prefix)]
    held = remote.ref_digests(names) if names else {}
    refs = [{"name": n, "digest": d} for n, d in held.items() if d is not None]
    if args.json:
        emit_json(refs)
        return 0
    if refs or not out.is_terminal:
        print_table(("ref", "digest"), [(r["name"], r["digest"]) for r in refs])
    else:
        out.print("no refs")
    return 0


def cmd_stats_remote(args: argparse.Namespace, out: Console) -> int:
    args.remote = remote_url(args.remote)
    remote = _open(args.remote)
    u = remote_usage(remote)
    doc = {
        "remote": redact_url(args.remote),
        "entries": u["entries"],
        "blobs": u["blobs"],
        "bytes": u["logical_bytes"],
        "unique_bytes": u["reachable_bytes"],
        "stored_bytes": u["bytes"],
        "unreferenced_bytes": u["bytes"] - u["reachable_bytes"],
        "missing": u["missing"],
        "dedup_ratio": u["dedup_ratio"],
        "damaged": u["damaged"],
        "incomplete": u["incomplete"],
        "incomplete_bytes": u["incomplete_bytes"],
    }
    bad = bool(u["missing"] or u["damaged"])
    if args.json:
        emit_json(doc)
        return 1 if bad else 0
    rows: list[tuple[object, ...]] = [
        ("entries", doc["entries"]),
        ("blobs", doc["blobs"]),
        ("bytes (entries in full)", human_size(doc["bytes"])),
        ("unique bytes", human_size(doc["unique_bytes"])),
        ("dedup ratio", f"{doc['dedup_ratio']:.2f}x"),
        ("stored bytes", human_size(doc["stored_bytes"])),
        ("unreferenced bytes", human_size(doc["unreferenced_bytes"])),
    ]
    if u["incomplete"]:
        rows.append(("incomplete uploads", f"{u['incomplete']} ({human_size(u['incomplete_bytes'])})"))
    if u["missing"]:
        rows.append(("missing objects", len(u["missing"])))
    if u["damaged"]:
        rows.append(("damaged manifests", len(u["damaged"])))
    print_table(("", ""), rows, title=doc["remote"], header=False)
    return 1 if bad else 0


def cmd_gc_remote(args: argparse.Namespace, out: Console) -> int:
    if args.max_size is not None:
        raise UsageError("--max-size applies to a local store, not to --remote")
    args.remote = remote_url(args.remote)
    remote = _open(args.remote)
    doc = remote_gc(remote, grace_seconds=args.grace, dry_run=args.dry_run)
    doc["remote"] = redact_url(args.remote)
    if args.json:
        emit_json(doc)
        return 0
    verb = "would free" if args.dry_run else "freed"
    out.print(
        f"{verb} {doc['objects_freed']} remote objects ({human_size(doc['bytes_freed'])}), kept {doc['objects_kept']}"
    )
    if doc["damaged"]:
        out.print(
            f"kept everything {len(doc['damaged'])} damaged manifests name: {', '.join(doc['damaged'][:3])}"
            + (" ..." if len(doc["damaged"]) > 3 else "")
        )
    return 0


def add_commands(command: Any) -> None:
    """Register push and pull with the command line's `command(name, func, help)`."""
    p = command(
        "push",
        cmd_push,
        "upload refs and what they reach to a remote (only what it lacks)",
    )
    _remote_args(p, "refs to push (default: all)")
    p.add_argument(
        "--sign", metavar="KEYFILE", help="sign the refs with this secret key (default: $PRECOMPILE_SIGNING_KEY)"
    )
    p = command("pull", cmd_pull, "download refs and what they reach from a remote, verified")
    _remote_args(p, "refs to pull (default: all the remote holds)")
    p.add_argument(
        "--trusted-key",
        action="append",
        metavar="KEY",
        help="pull only refs signed by this public key or key file (repeatable; default: $PRECOMPILE_TRUSTED_KEYS)",
    )
    p.add_argument(
        "--allow-unsigned",
        action="store_true",
        help="with no trusted key, pull every ref unchecked (default: $PRECOMPILE_ALLOW_UNSIGNED=1)",
    )


def _remote_args(p: argparse.ArgumentParser, refs: str) -> None:
    p.add_argument(
        "refs",
        nargs="*",
        metavar="[REMOTE] REF",
        help="the remote's URL (redis://host:port/db, rediss://..., redis+cluster://host:port; "
        f"default: ${REMOTE_ENV}), then the {refs}",
    )
    p.add_argument("--remote", metavar="URL", help="the remote's URL, as an option")
