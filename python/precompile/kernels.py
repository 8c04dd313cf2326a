"""Compiled kernels as blobs, and putting them back where torch looks.

Two kinds of binaries make a warm start compile-free:

- C++ libraries Inductor built for CPU kernels. They live in Inductor's cache
  directory under a path derived from the kernel source and compiler flags;
  placing the file there makes torch's loader find it instead of running g++.
  On a machine with other flags the path differs, so a mismatch is a plain
  cache miss, never a wrong binary.
- Triton kernel files. Only the binary (cubin, hsaco, ...) and the json
  metadata are read to launch; IR and PTX are kept in the store but never
  read on the load path. The group file that tells Triton which files belong
  to a kernel is rewritten to list just those, or Triton would treat the
  missing IR as a cache miss.
- Triton autotuning results (`.best_config`): which of a kernel's candidate
  configs won on the host that compiled it. Placed beside where Inductor
  keeps the kernel's source, they spare a fresh host the benchmarking and
  make it launch the same config.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable
from typing import Any

__all__ = [
    "LOAD_EXTENSIONS",
    "autotune_relpath",
    "is_load_file",
    "kernel_source_relpath",
    "mark_probe_loaded",
    "place_autotune",
    "place_library",
    "trim_group_file",
    "validate_autotune_path",
    "validate_kernel_source_path",
    "validate_library_path",
]

# Files Triton reads to launch a kernel; everything else is for debugging.
LOAD_EXTENSIONS = (".cubin", ".hsaco", ".zebin", ".spv", ".json")

_LIBRARY_PATH = re.compile(r"^[A-Za-z0-9_]{2}/[A-Za-z0-9_.\-]{1,200}\.so$")
# Inductor's `<dir of the kernel source>/<key>.best_config`: a two-character
# dir and a hash-derived name.
_AUTOTUNE_PATH = re.compile(r"^[A-Za-z0-9_]{2}/[A-Za-z0-9_\-]{1,200}\.best_config$")
# A Triton kernel's source file, `<name[1:3]>/<name>.py`, which its
# autotuning result sits beside.
_KERNEL_SOURCE_PATH = re.compile(r"^([A-Za-z0-9_]{2})/[A-Za-z0-9_]\1[A-Za-z0-9_\-]{0,198}\.py$")


def is_load_file(filename: str) -> bool:
    """Whether Triton reads `filename` when it launches a cached kernel."""
    return filename.endswith(LOAD_EXTENSIONS)


def trim_group_file(payload: bytes) -> bytes:
    """Drop the children of a Triton `__grp__*.json` that launching never reads."""
    data = json.loads(payload)
    children = data.get("child_paths")
    if isinstance(children, dict):
        data["child_paths"] = {name: path for name, path in children.items() if is_load_file(name)}
    return json.dumps(data, sort_keys=True).encode()


def validate_library_path(relpath: str) -> str:
    """Refuse a stored library path that could land outside the cache dir.

    The path comes from the store, so it is checked before anything is
    written: two hex-ish characters, a slash, a plain file name ending .so.
    """
    if not _LIBRARY_PATH.match(relpath) or ".." in relpath:
        raise ValueError(f"refusing stored kernel library path {relpath!r}")
    return relpath


def validate_autotune_path(relpath: str) -> str:
    """Refuse a stored autotuning-result path that could land outside the cache dir."""
    if not _AUTOTUNE_PATH.match(relpath) or ".." in relpath:
        raise ValueError(f"refusing stored autotune path {relpath!r}")
    return relpath


def validate_kernel_source_path(relpath: str) -> str:
    """Refuse a stored kernel source path that is not Inductor's layout inside the cache dir."""
    if not _KERNEL_SOURCE_PATH.match(relpath) or ".." in relpath:
        raise ValueError(f"refusing stored kernel source path {relpath!r}")
    return relpath


def _relpath(path: str, cache_dir: str, validate: Callable[[str], str]) -> str | None:
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(cache_dir))
    if rel.startswith(".."):
        return None
    try:
        return validate(rel.replace(os.sep, "/"))
    except ValueError:
        return None


def library_relpath(path: str, cache_dir: str) -> str | None:
    """`path` relative to the Inductor cache dir, or None if it lies elsewhere."""
    return _relpath(path, cache_dir, validate_library_path)


def autotune_relpath(path: str, cache_dir: str) -> str | None:
    """An autotuning result's `path` relative to the Inductor cache dir, or None."""
    return _relpath(path, cache_dir, validate_autotune_path)


def kernel_source_relpath(path: str, cache_dir: str) -> str | None:
    """A Triton kernel source file's `path` relative to the Inductor cache dir, or None."""
    return _relpath(path, cache_dir, validate_kernel_source_path)


def mark_probe_loaded(cache_dir: str, relpath: str) -> None:
    """Write the marker Inductor leaves beside an ISA probe that loaded.

    See `_torch.isa_probe_libraries` for why this is sound.
    """
    marker = os.path.join(cache_dir, validate_library_path(relpath)) + ".load_ok"
    if not os.path.exists(marker):
        with open(marker, "w"):
            pass


def place_library(cache_dir: str, relpath: str, blob: Any) -> bool:
    """Write a stored library to its place in the cache dir unless one is there.

    Returns whether a file was written.
    """
    return _place(os.path.join(cache_dir, validate_library_path(relpath)), blob, 0o755)


def place_autotune(cache_dir: str, relpath: str, blob: Any) -> bool:
    """Write a stored autotuning result to its place in the cache dir unless one
    is there: this host's own tuning, where it has one, is kept."""
    return _place(os.path.join(cache_dir, validate_autotune_path(relpath)), blob, 0o644)


def _place(target: str, blob: Any, mode: int) -> bool:
    # Written to a temporary name and renamed, so a process that reads the
    # file at the same moment sees either nothing or the whole file.
    if os.path.exists(target):
        return False
    directory = os.path.dirname(target)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".precompile-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(memoryview(blob))
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return True
