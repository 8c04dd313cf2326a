"""The `precompile` command line (see `main`). Imports no torch: only `demo`
and `explain` load what they need when they run."""

from __future__ import annotations

from .main import main

__all__ = ["main"]
