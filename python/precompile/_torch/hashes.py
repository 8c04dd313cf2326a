"""torch's and Triton's install hashes, memoized by the files they cover."""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
from collections.abc import Callable


@dataclasses.dataclass(frozen=True)
class InstallHash:
    """A hash torch or Triton computes over its own installation, once per process.

    `files()` lists every file the hash reads (a superset is fine);
    `compute()` runs the original; `prime(value)` makes this process use
    `value` without hashing; `valid(value)` checks a memoized value's shape;
    `computed()` says whether this process has the value already.
    """

    name: str
    files: Callable[[], list[str]]
    compute: Callable[[], str]
    prime: Callable[[str], None]
    valid: Callable[[str], bool]
    computed: Callable[[], bool]


def _package_files(root: str, everything: bool) -> list[str]:
    """Files under `root`: all of them, or those in Python package dirs
    (a dir holding `__init__.py`), which is what a module walk can reach."""
    found = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
        if everything or directory == root or "__init__.py" in files:
            found += [os.path.join(directory, f) for f in sorted(files)]
    return found


def _torch_key_hash() -> InstallHash | None:
    try:
        from torch._inductor import codecache
    except ImportError:
        return None
    torch_key = getattr(codecache, "torch_key", None)
    root = getattr(codecache, "_TORCH_PATH", None)
    # Only a torch_key that can be prepopulated (`set`) is memoized.
    if torch_key is None or not hasattr(torch_key, "set") or not isinstance(root, str):
        return None

    def files() -> list[str]:
        # torch_key walks torch's modules and adds a few non-module files of
        # Inductor's: those live in Inductor's tree, taken whole.
        inductor = os.path.dirname(codecache.__file__)
        return sorted(set(_package_files(root, everything=False)) | set(_package_files(inductor, everything=True)))

    def prime(value: str) -> None:
        try:
            torch_key.set(bytes.fromhex(value))
        except AssertionError:
            pass  # already computed in this process

    def valid(value: str) -> bool:
        try:
            return len(bytes.fromhex(value)) >= 16
        except ValueError:
            return False

    # Every Inductor compile computes torch_key; a process that saves has it.
    return InstallHash("torch_key", files, lambda: torch_key().hex(), prime, valid, lambda: True)


def _triton_key_hash() -> InstallHash | None:
    try:
        import triton
        import triton.runtime.cache as triton_cache
    except ImportError:
        return None
    original = getattr(triton_cache, "triton_key", None)
    if original is None or not hasattr(original, "cache_info"):
        return None
    original = getattr(original, "_precompile_original", original)
    root = os.path.dirname(os.path.abspath(triton.__file__))
    version = str(getattr(triton, "__version__", ""))

    def prime(value: str) -> None:
        current = triton_cache.triton_key
        if getattr(current, "_precompile_original", None) is not None or current.cache_info().currsize:
            return  # primed already, or computed in this process

        @functools.cache
        def triton_key() -> str:
            return value

        triton_key._precompile_original = original  # type: ignore[attr-defined]
        # Every module that imported the function by name gets the primed
        # one; module dicts are read directly so lazy modules stay unloaded.
        for module in list(sys.modules.values()):
            namespace = getattr(module, "__dict__", None)
            if isinstance(namespace, dict) and namespace.get("triton_key") is current:
                namespace["triton_key"] = triton_key

    return InstallHash(
        "triton_key",
        lambda: _package_files(root, everything=True),
        original,
        prime,
        lambda value: value.startswith(version) and value.isascii() and len(value) < 1 << 16,
        lambda: bool(original.cache_info().currsize),
    )


def install_hashes(gpu: bool) -> list[InstallHash]:
    """The whole-install hashes a load will compute: for a GPU entry Triton's,
    and torch's (part of every Triton kernel's in-process cache key). A CPU
    entry's load computes neither (only a compile does), so priming one
    there would walk or hash an installation for nothing."""
    if not gpu:
        return []
    found = [_torch_key_hash(), _triton_key_hash()]
    return [h for h in found if h is not None]
