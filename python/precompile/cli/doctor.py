"""`precompile doctor`: this host's versions, and which torch patches `install()` starts here and why."""

from __future__ import annotations

import argparse
import platform
from typing import Any

from rich.markup import escape

from .._core import __version__
from .console import emit_json, out

__all__ = ["cmd_doctor"]


def _ignore(*_: Any) -> None:
    pass


def _nothing_to_save() -> dict[str, Any]:
    return {}


def _report() -> dict[str, Any]:
    # Imported here: every other command runs without torch.
    from .. import _torch as tc
    from ..entries import environment

    # Starting the patches the way install() does (and stopping them again)
    # is what tells an active patch from one this torch needs no adaptation for.
    off = tc.patches_off()
    tc.start_all(off=off, save=_nothing_to_save, on_install_failure=_ignore, on_unnamed=_ignore)
    try:
        statuses = tc.report()
    finally:
        tc.stop_all()
    return {
        "precompile": __version__,
        "torch": tc.TORCH_VERSION,
        "triton": tc.TRITON_VERSION,
        "python": platform.python_version(),
        # What this host's CPU entries are filed under (GPU entries add the device).
        "environment": {"id": environment("cpu").id, **environment("cpu").to_json()},
        "patches": [s.to_json() for s in statuses],
    }


def cmd_doctor(args: argparse.Namespace) -> int:
    """Print versions and the patch report; exit 0."""
    doc = _report()
    if args.json:
        emit_json(doc)
        return 0
    patches = doc["patches"]
    active = sum(p["active"] for p in patches)
    out.print(
        f"precompile {doc['precompile']}, torch {doc['torch']}, triton {doc['triton'] or 'absent'}, "
        f"Python {doc['python']}",
        soft_wrap=True,
    )
    out.print(f"CPU entries are filed under environment {doc['environment']['id']}", soft_wrap=True)
    out.print(f"torch patches active on this host: {active} of {len(patches)}", soft_wrap=True)
    width = max(len(p["name"]) for p in patches)
    for p in patches:
        state = "active  " if p["active"] else "inactive"
        why = p["summary"] if p["active"] else f"{p['reason']}: {p['summary']}"
        out.print(escape(f"  {state}  {p['name']:<{width}}  {why}"), soft_wrap=True)
    return 0
