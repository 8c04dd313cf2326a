"""What each object under an entry is for, read from its parent manifest.

A manifest's metadata names its children by field (see docs/FORMAT.md and
`schema`): an entry names its Dynamo record, backends, ISA probes and Triton
stubs; a graph its pickle skeleton, fields, kernels and libraries. The role
of a child is the field that names it, in words, with the field's path so
that nothing is lost in the wording.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["child_roles"]

_DIGEST = re.compile(r"[0-9a-f]{64}")

# The first word of a field path, in words (fields not listed keep their path).
_WORDS = {
    "dynamo": "Dynamo entry",
    "backends": "backend",
    "isa": "ISA probe",
    "triton_stubs": "Triton stub",
    "skeleton": "pickled skeleton",
    "fields": "field",
    "triton": "Triton kernel",
    "libraries": "compiled library (.so)",
    "autotune": "autotune result",
    "static_autotuners": "static autotuners",
    "forward": "forward graph",
    "backward": "backward graph",
    "bw_module": "backward module",
    "artifact": "pickled artifact",
}


def _paths(value: Any, path: str, found: dict[str, str]) -> None:
    if isinstance(value, str):
        if _DIGEST.fullmatch(value):
            found.setdefault(value, path)
    elif isinstance(value, dict):
        for k, v in value.items():
            _paths(v, f"{path}.{k}" if path else str(k), found)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _paths(v, f"{path}[{i}]", found)


def _role(path: str) -> str:
    head = re.split(r"[.\[]", path, maxsplit=1)[0]
    word = _WORDS.get(head)
    if head == "backends":
        # backends.<name>.manifest is the backend itself; deeper, its binding.
        parts = path.split(".")
        if len(parts) == 3 and parts[2] == "manifest":
            return f"backend {parts[1]}"
        return f"backend {parts[1] if len(parts) > 1 else ''} binding ({path})"
    if path.endswith(".record"):
        return f"{word or head} record ({path})"
    if ".parts[" in path:
        return f"{word or head} buffer ({path})"
    return f"{word} ({path})" if word else path


def child_roles(meta: dict[str, Any]) -> dict[str, str]:
    """{child digest: role} for the digests a manifest's metadata names."""
    found: dict[str, str] = {}
    _paths(meta, "", found)
    return {d: _role(p) for d, p in found.items()}
