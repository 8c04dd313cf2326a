"""Content-addressed, memory-mapped store for torch.compile precompile artifacts."""

from ._core import (
    Blob,
    CorruptObjectError,
    FormatError,
    LockTimeout,
    MissingObjectError,
    Store,
    StoreError,
    __version__,
    blake3_hex,
)

__all__ = [
    "Blob",
    "CorruptObjectError",
    "FormatError",
    "LockTimeout",
    "MissingObjectError",
    "Store",
    "StoreError",
    "__version__",
    "blake3_hex",
]
