"""The warning the torch integration raises, and its error for a torch it cannot
use, in a module that imports no torch.

Tools that only read a store (the CLI, the remote layer) warn with it too, and
importing it must not cost a torch import.
"""

from __future__ import annotations

__all__ = ["PrecompileWarning", "UnsupportedTorchError"]


class PrecompileWarning(UserWarning):
    """Something was not stored or not loaded; torch compiles it instead."""


class UnsupportedTorchError(RuntimeError):
    """`install()` was called under a torch older than precompile supports."""
