"""Content-addressed, memory-mapped store for torch.compile precompile artifacts.

The store itself (`Store`, `Blob`, `Bundle`, the errors) needs no torch. The torch
integration (`install`, `save`, ...) is imported on first use, so tools
that only read a store start fast.
"""

from typing import TYPE_CHECKING, Any

from ._core import (
    Blob,
    Bundle,
    BundleStats,
    BundleVerifyReport,
    CorruptObjectError,
    EvictReport,
    ExportReport,
    FormatError,
    GcReport,
    ImportReport,
    InvalidDigestError,
    InvalidNameError,
    LockTimeout,
    MissingObjectError,
    RefConflictError,
    RefNotFoundError,
    RefUsage,
    SigningKey,
    Stats,
    Store,
    StoreError,
    StoreIOError,
    TrustedKeys,
    UntrustedError,
    Usage,
    VerifyReport,
    __version__,
    blake3_hex,
    keygen,
    open_bundle,
)
from .remote import RemoteError
from .warning import PrecompileWarning, UnsupportedTorchError

if TYPE_CHECKING:
    # Type checkers see the real signatures; at run time `__getattr__` below
    # imports these (and torch) only when first used.
    from .context import SaveReport
    from .dynamo import StoreDynamoCache, install, installed, save, uninstall
    from .paths import default_store_path

# Names whose modules import torch, loaded on first access.
_TORCH_NAMES = {
    "SaveReport": "context",
    "StoreDynamoCache": "dynamo",
    "default_store_path": "paths",
    "install": "dynamo",
    "installed": "dynamo",
    "save": "dynamo",
    "uninstall": "dynamo",
}


def __getattr__(name: str) -> Any:
    module = _TORCH_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'precompile' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "Blob",
    "Bundle",
    "BundleStats",
    "BundleVerifyReport",
    "CorruptObjectError",
    "EvictReport",
    "ExportReport",
    "FormatError",
    "GcReport",
    "ImportReport",
    "InvalidDigestError",
    "InvalidNameError",
    "LockTimeout",
    "MissingObjectError",
    "PrecompileWarning",
    "RefConflictError",
    "RefNotFoundError",
    "RefUsage",
    "RemoteError",
    "SaveReport",
    "SigningKey",
    "Stats",
    "Store",
    "StoreDynamoCache",
    "StoreError",
    "StoreIOError",
    "TrustedKeys",
    "UnsupportedTorchError",
    "UntrustedError",
    "Usage",
    "VerifyReport",
    "__version__",
    "blake3_hex",
    "default_store_path",
    "install",
    "installed",
    "keygen",
    "open_bundle",
    "save",
    "uninstall",
]
