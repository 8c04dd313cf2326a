"""Where the command line writes: text on stdout, errors and progress on stderr."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console

__all__ = ["emit_json", "err", "out"]

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def emit_json(doc: Any) -> None:
    """Print `doc` as one JSON document on stdout (what `--json` promises)."""
    print(json.dumps(doc, indent=2, sort_keys=True))
