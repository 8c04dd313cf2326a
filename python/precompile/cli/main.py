"""The `precompile` command line: inspect, check, trim and move stores.

    precompile [--store PATH] COMMAND [--json] ...

COMMAND is one of ls, show, stats, verify, gc, export, import, du, keygen, explain,
doctor, push, pull (see `remote`; stats and gc also take `--remote URL`); `--store`
may also name a bundle file for the read-only commands. The read commands
take `--json` and then print one JSON document on stdout. Progress bars go
to stderr and only appear on a terminal.

Exit status: 0 when all is well; 1 when a problem was found (corrupt or
missing objects) or an operation failed; 2 for a bad invocation (unknown
command or option, no store at the path, unknown ref, bad size).

The commands live by what they do: `entries` (ls, show, stats, du),
`maintenance` (verify, gc, export, import, keygen) and `remote` (push, pull,
stats and gc of a remote); this module parses the command line and runs one.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from rich.markup import escape

from .. import paths
from .._core import StoreError, __version__
from .console import emit_json, err, out
from .doctor import cmd_doctor
from .entries import cmd_du, cmd_ls, cmd_show
from .maintenance import cmd_export, cmd_gc, cmd_import, cmd_keygen, cmd_verify
from .remote import add_commands, cmd_gc_remote, cmd_stats_remote
from .stats import cmd_stats
from .views import Source, UsageError, parse_duration, parse_size

__all__ = ["main"]


def cmd_demo(args: argparse.Namespace) -> int:
    from ..demo import run

    # Only an explicit --store: the demo leaves the default store alone.
    return run(args.store, lambda text: out.print(escape(text), soft_wrap=True))


def cmd_explain(args: argparse.Namespace, src: Source) -> int:
    from ..miss_log import LOG_NAME, read_records, summary_lines

    try:
        records = read_records(str(src.path), all_runs=args.all)
    except FileNotFoundError:
        raise UsageError(f"no run has recorded loads or misses in {src.path} ({LOG_NAME})") from None
    if args.json:
        emit_json(records)
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
    stats = command("stats", cmd_stats, "where the store is, its sizes, and hits and misses across processes")
    stats.add_argument("--remote", metavar="URL", help="report on this remote instead of the store")
    stats.add_argument("--zero", action="store_true", help="reset the hit, miss and save counts")
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
    add_commands(lambda name, func, text: command(name, lambda a, s: func(a, s, out, err), text))
    command(
        "explain", cmd_explain, "why the last run compiled: the store's loads and misses, with the failed guards"
    ).add_argument("--all", action="store_true", help="every run the record file keeps, not only the last")
    command("doctor", cmd_doctor, "versions, and which torch patches install() starts on this host and why")
    sub.add_parser(
        "demo",
        help="compile a model into a store, then warm-start it in a fresh process",
        description="compile a model into a store (a temporary one unless --store), then warm-start it "
        "in a fresh process with empty caches (needs torch)",
    ).set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "keygen":  # needs no store
            return cmd_keygen(args)
        if args.command == "doctor":
            return cmd_doctor(args)
        if args.command == "demo":  # a temporary store unless --store
            return cmd_demo(args)
        if getattr(args, "remote", None) and args.command in ("stats", "gc"):
            run = cmd_stats_remote if args.command == "stats" else cmd_gc_remote
            return int(run(args, out))
        src = Source(args.store or paths.default_store_path(), create=args.command in ("import", "pull"))
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
