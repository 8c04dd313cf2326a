"""Where the command line writes, and how: text on stdout, errors and progress on stderr.

On a terminal, rich lays out tables and colours. Anywhere else (a pipe, a
file, a script) every value is printed whole: tables become tab-separated
lines, messages are never wrapped, so `precompile ls | grep NAME` and
`cut -f1` see what the store holds. Text that came from a store, a bundle or
a remote passes through `clean` first: it may carry escape sequences meant
for the terminal (clear the screen, set the clipboard through OSC 52).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

__all__ = ["clean", "emit_json", "err", "esc", "out", "print_table", "redact_urls_in"]


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich exits with status 1 here; the command line treats a reader
        # that went away as a normal end (see main), so pass it on.
        raise BrokenPipeError


out = _Console(highlight=False, emoji=False)
out.soft_wrap = not out.is_terminal
# Errors are one line each, however narrow the terminal.
err = _Console(stderr=True, highlight=False, emoji=False, soft_wrap=True)

# C0 controls, DEL and C1 controls: what a terminal acts on instead of showing.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def clean(text: object) -> str:
    """`text` with every control character written as a visible `\\xNN` escape."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def esc(text: object) -> str:
    """`text` from a store, bundle or remote, safe inside rich markup: no control
    characters, no markup of its own."""
    return escape(clean(text))


_USERINFO = re.compile(r"([a-z][a-z0-9+.-]*://)([^/@\s]*)@", re.IGNORECASE)


def redact_urls_in(text: str) -> str:
    """`text` with the password (or a lone token) of every URL in it replaced by `***`."""
    return _USERINFO.sub(lambda m: m.group(1) + _redact_userinfo(m.group(2)) + "@", text)


def _redact_userinfo(userinfo: str) -> str:
    user, colon, _ = userinfo.partition(":")
    return f"{user}:***" if colon else "***"


def emit_json(doc: Any) -> None:
    """Print `doc` as one JSON document on stdout (what `--json` promises).

    json escapes control characters itself, so store text needs no `clean`.
    """
    print(json.dumps(doc, indent=2, sort_keys=True))


def print_table(
    columns: Sequence[str], rows: Sequence[Sequence[object]], *, title: str | None = None, header: bool = True
) -> None:
    """Rows of plain values (cleaned and escaped here): a rich table on a
    terminal, else one tab-separated line per row, without a header."""
    if not out.is_terminal:
        for row in rows:
            # Past rich: it would turn the tabs into spaces.
            print("\t".join(clean(cell) for cell in row), file=out.file)
        return
    table = Table(*columns, title=None if title is None else esc(title), show_header=header, box=None)
    for row in rows:
        table.add_row(*(esc(cell) for cell in row))
    out.print(table)
