"""The `precompile` command line: inspect, check, trim and move stores.

    precompile [--store PATH] [--shared] COMMAND [--json] ...

COMMAND is one of ls, show, rm, prune, stats, du, verify, gc, export, import,
dir, keygen, pubkey, explain, doctor, demo, push and pull (see `remote`; ls,
stats and gc also take `--remote [URL]`). The global options (`--store`,
`--shared`) go before or after the command. `--store` may also name a bundle
file for the read-only commands. Commands that print data take `--json` and
then print one JSON document on stdout. Errors go to stderr, one line each;
progress bars go to stderr and only appear on a terminal. Off a terminal
every value is printed whole (tables as tab-separated lines), and a reader
that stops early (`precompile ls | head`) ends the command normally.

Exit status: 0 when all is well; 1 when a problem was found (corrupt or
missing objects) or an operation failed; 2 for a bad invocation (unknown
command or option, a path that holds no store or bundle, unknown ref, bad
size, duration or remote URL).

The commands live by what they do: `entries` (ls, show, stats, du),
`removal` (rm, prune), `maintenance` (verify, gc, export, import, keygen,
pubkey) and `remote` (push, pull, and ls, stats and gc of a remote); this
module parses the command line and runs one.
"""

from __future__ import annotations

import argparse
import errno
import importlib.util
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from .. import paths
from .._core import StoreError, __version__
from .console import clean, emit_json, err, esc, out, redact_urls_in
from .doctor import cmd_doctor
from .entries import cmd_du, cmd_ls, cmd_show
from .maintenance import cmd_export, cmd_gc, cmd_import, cmd_keygen, cmd_pubkey, cmd_verify
from .remote import FROM_ENV, add_commands, cmd_gc_remote, cmd_ls_remote, cmd_stats_remote
from .removal import cmd_prune, cmd_rm
from .stats import cmd_stats
from .views import Source, UsageError, parse_duration, parse_size

__all__ = ["main"]

SHARED_ENV = "PRECOMPILE_SHARED"
# How much of a failed demo process's stderr to show.
DEMO_TAIL_LINES = 10


def cmd_demo(args: argparse.Namespace) -> int:
    try:
        found = importlib.util.find_spec("torch") is not None
    except ImportError:
        found = False
    if not found:
        raise StoreError("demo needs torch, which is not installed here (pip install torch)")
    from ..demo import run

    try:
        # Only an explicit --store: the demo leaves the default store alone.
        return run(args.store, lambda text: out.print(esc(text), soft_wrap=True))
    except subprocess.CalledProcessError as e:
        # The child's last words say why; they come first, the error line last.
        for line in (e.stderr or "").strip().splitlines()[-DEMO_TAIL_LINES:]:
            err.print(f"  {esc(line)}", soft_wrap=True)
        what = "compile" if "compile" in e.cmd else "load"
        raise StoreError(f"the demo's {what} process failed with exit status {e.returncode}") from None


def cmd_explain(args: argparse.Namespace, src: Source) -> int:
    from ..miss_log import LOG_NAME, read_records, summary_lines

    src.need_store("explain")
    try:
        records = read_records(str(src.path), all_runs=args.all)
    except FileNotFoundError:
        raise UsageError(f"no run has recorded loads or misses in {src.path} ({LOG_NAME})") from None
    if args.json:
        emit_json(records)
        return 0
    for line in summary_lines(records):
        out.print(esc(line), soft_wrap=True)
    return 0


def cmd_dir(args: argparse.Namespace) -> int:
    """The store path the other commands use; it need not exist yet."""
    path = os.path.abspath(args.store or paths.default_store_path())
    if args.json:
        emit_json({"path": path, "exists": os.path.isdir(path)})
    else:
        print(clean(path))
    return 0


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _global_options(parser: argparse.ArgumentParser, *, after_command: bool) -> None:
    """The options every command takes, before or after its name.

    After the command they default to SUPPRESS, so that a value given before
    the command is not overwritten by the subcommand's own default.
    """
    default: dict[str, Any] = {"default": argparse.SUPPRESS} if after_command else {}
    parser.add_argument(
        "--store",
        metavar="PATH",
        help="store directory, or a bundle file for read commands "
        "(default: $PRECOMPILE_STORE, else $XDG_CACHE_HOME/precompile or ~/.cache/precompile)",
        **default,
    )
    parser.add_argument(
        "--shared",
        action="store_true",
        help=f"open a team store (a setgid, group-writable directory; default: ${SHARED_ENV}=1)",
        **default,
    )


def _remote_option(p: argparse.ArgumentParser, text: str) -> None:
    p.add_argument(
        "--remote",
        nargs="?",
        const=FROM_ENV,
        metavar="URL",
        help=f"{text} (URL omitted: $PRECOMPILE_REMOTE)",
    )


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad invocation reported like every other error: one
    line on stderr (`--help` shows the usage), exit status 2."""

    def error(self, message: str) -> NoReturn:
        _error(f"{message} (see {self.prog} --help)")
        sys.exit(2)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="precompile", description="Inspect, check, trim and move precompile stores and bundles.")
    _global_options(parser, after_command=False)
    parser.add_argument("--version", action="version", version=f"precompile {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, func: Any, text: str, *, json: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=text, description=text)
        _global_options(p, after_command=True)
        if json:
            p.add_argument("--json", action="store_true", help="print JSON instead of text")
        p.set_defaults(func=func)
        return p

    ls = command("ls", cmd_ls, "list refs with their function, sizes and last use")
    ls.add_argument("prefix", nargs="?", default="", help="only refs starting with this")
    _remote_option(ls, "list the refs of this remote instead")
    command("show", cmd_show, "print the manifest tree of an entry, with sizes and roles").add_argument(
        "ref", help="a ref name, a digest or a unique digest prefix (4+ hex), or a function name (MLP.forward)"
    )
    rm = command("rm", cmd_rm, "remove entries (their objects go at the next gc or prune)")
    rm.add_argument("refs", nargs="*", metavar="REF", help="ref names, digest prefixes or function names")
    rm.add_argument("--all", action="store_true", help="remove every entry")
    rm.add_argument("--dry-run", action="store_true", help="report what would go; change nothing")
    prune = command("prune", cmd_prune, "remove entries unused for a while, then collect garbage")
    prune.add_argument(
        "--older-than",
        type=parse_duration,
        required=True,
        metavar="DURATION",
        help="remove entries not used (loaded or saved) within this long (30d, 12h, ...)",
    )
    prune.add_argument("--dry-run", action="store_true", help="report what would go; change nothing")
    prune.add_argument(
        "--grace",
        type=parse_duration,
        default=3600.0,
        metavar="DURATION",
        help="keep unreferenced objects younger than this (default 1h)",
    )
    stats = command("stats", cmd_stats, "where the store is, its sizes, and hits and misses across processes")
    _remote_option(stats, "report on this remote instead of the store")
    stats.add_argument("--zero", action="store_true", help="reset the hit, miss and save counts")
    verify = command("verify", cmd_verify, "rehash every object (in parallel); exit 1 on problems")
    verify.add_argument(
        "--repair",
        action="store_true",
        help="fetch damaged objects again from --layer or --remote (checked by digest), "
        "else drop the refs that reach them; exit 1 if refs were dropped or damage remains",
    )
    verify.add_argument(
        "--layer", action="append", metavar="PATH", help="with --repair: a store or bundle to fetch from (repeatable)"
    )
    verify.add_argument("--remote", metavar="URL", help="with --repair: a remote to fetch from")
    verify.add_argument(
        "--trusted-key",
        action="append",
        metavar="KEY",
        help="with --repair: accept only bundles signed by this public key or key file (repeatable)",
    )
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
    _remote_option(gc, "collect this remote instead: delete what no remote ref reaches")
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
    imp.add_argument(
        "--allow-unsigned",
        action="store_true",
        help="with no trusted key, import the bundle unchecked (default: $PRECOMPILE_ALLOW_UNSIGNED=1)",
    )
    command("keygen", cmd_keygen, "write a new secret signing key (mode 0600) and print its public key").add_argument(
        "keyfile", help="where to write the secret key (never overwritten)"
    )
    command("pubkey", cmd_pubkey, "print the public key of a secret key file (never the secret)").add_argument(
        "keyfile", help="a secret key file written by keygen"
    )
    command("dir", cmd_dir, "print the store path the commands use")
    command("du", cmd_du, "disk usage per ref: what deleting each would free")
    add_commands(lambda name, func, text: command(name, lambda a, s: func(a, s, out, err), text))
    command(
        "explain", cmd_explain, "why the last run compiled: the store's loads and misses, with the failed guards"
    ).add_argument("--all", action="store_true", help="every run the record file keeps, not only the last")
    command("doctor", cmd_doctor, "versions, and which torch patches install() starts on this host and why")
    command(
        "demo",
        cmd_demo,
        "compile a model into a store (a temporary one unless --store), then warm-start it in a fresh process "
        "with empty caches (needs torch)",
        json=False,
    )
    return parser


# Commands that need no store at all, and those that create it.
_NO_STORE = {"keygen": cmd_keygen, "pubkey": cmd_pubkey, "doctor": cmd_doctor, "dir": cmd_dir}
_CREATE = ("import", "pull")


def _run(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    args.shared = args.shared or _env_flag(SHARED_ENV)
    if args.command in _NO_STORE:
        return _NO_STORE[args.command](args)
    if args.command == "demo":  # a temporary store unless --store
        return cmd_demo(args)
    if getattr(args, "remote", None) is not None and args.command in ("ls", "stats", "gc"):
        run = {"ls": cmd_ls_remote, "stats": cmd_stats_remote, "gc": cmd_gc_remote}[args.command]
        return int(run(args, out))
    src = Source(args.store or paths.default_store_path(), create=args.command in _CREATE, shared=args.shared)
    return int(args.func(args, src))


# errno values whose system wording reads badly after a path.
_ERRNO_WORDS = {errno.EEXIST: "already exists", errno.ENOENT: "does not exist"}


def describe_os_error(e: OSError) -> str:
    """An OSError in words: what failed on which path, without `[Errno N]`."""
    standard = e.errno is not None and e.strerror == os.strerror(e.errno)
    reason = (_ERRNO_WORDS.get(e.errno or 0) if standard else None) or e.strerror or str(e)
    reason = reason[:1].lower() + reason[1:]
    if e.filename is None:
        return reason
    where = os.fsdecode(e.filename)
    if e.filename2 is not None:
        where += f" -> {os.fsdecode(e.filename2)}"
    return f"{where}: {reason}"


def _error(message: str) -> None:
    if "open it as a shared store" in message:
        message += " (precompile --shared)"
    err.print(f"precompile: error: {esc(redact_urls_in(message))}")


def _stdout_closed() -> int:
    """The reader of stdout went away (`precompile ls | head`): a normal end.

    Later writes, including the interpreter's last flush, go to /dev/null
    instead of raising again.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status."""
    try:
        try:
            status = _run(argv)
        finally:
            sys.stdout.flush()  # a closed pipe shows here, not at exit
        return status
    except BrokenPipeError:
        return _stdout_closed()
    except UsageError as e:
        _error(str(e))
        return 2
    except KeyboardInterrupt:
        err.print("precompile: interrupted")
        return 130
    except OSError as e:
        # Before StoreError: the store's I/O errors are both.
        _error(describe_os_error(e))
        return 1
    except StoreError as e:
        _error(str(e))
        return 1
    except ValueError as e:
        _error(str(e))
        return 1
    except Exception as e:
        _error(f"{type(e).__name__}: {e}")
        return 1
