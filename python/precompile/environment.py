"""What an entry can be loaded by: its environment, and the short id entries are filed under.

An entry's compiled code holds bytecode for one Python, pickles of one torch
build's classes, kernels built by one Triton for one GPU architecture, and CPU
kernels for one vector ISA. Hosts of a fleet that differ in any of these must
not load each other's entries, and must not overwrite them either: refs are
`dynamo/<env-id>/<key>`, where the env-id is a digest of the environment's
canonical description (docs/FORMAT.md). This module imports no torch: the
command line reads and compares environments too.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from ._core import FormatError, blake3_hex

__all__ = ["ENV_ID_LEN", "Environment"]

# Hex digits of the env-id: 64 bits, ample for the environments one fleet sees.
ENV_ID_LEN = 16

# Each factor, in the words a miss names it by.
_LABELS = {
    "python": "Python",
    "torch": "torch",
    "torch_git": "torch build",
    "triton": "Triton",
    "cpu": "CPU ISA",
    "accelerator": "accelerator",
}
_REQUIRED = ("python", "torch", "cpu")


@dataclasses.dataclass(frozen=True)
class Environment:
    """One environment: `python` (implementation and major.minor, `cpython 3.11`),
    `torch` (`torch.__version__`), `torch_git` (the commit torch was built
    from), `triton` (its package version), `cpu` (the vector ISA level) and
    `accelerator` (`cuda 9.0`; None for a CPU entry)."""

    python: str
    torch: str
    torch_git: str | None
    triton: str | None
    cpu: str
    accelerator: str | None

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in sorted(_LABELS)}

    def canonical(self) -> bytes:
        """The description the env-id digests: sorted keys, no spaces, UTF-8."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")).encode("utf-8")

    @property
    def id(self) -> str:
        return blake3_hex(self.canonical())[:ENV_ID_LEN]

    @classmethod
    def from_json(cls, doc: Any) -> Environment:
        if not isinstance(doc, Mapping) or set(doc) != set(_LABELS):
            raise FormatError(f"environment is not an object with the fields {sorted(_LABELS)}")
        for name in _LABELS:
            value = doc[name]
            if not (isinstance(value, str) or (value is None and name not in _REQUIRED)):
                raise FormatError(f"environment field {name!r} is not a string")
        return cls(**{name: doc[name] for name in _LABELS})

    def differences(self, here: Environment) -> list[tuple[str, str]]:
        """The factors in which this (stored) environment differs from `here`:
        (field, `torch 2.11.0 stored, 2.15.0 here`), in a fixed order."""
        out = []
        for name, label in _LABELS.items():
            stored, local = getattr(self, name), getattr(here, name)
            if stored != local:
                out.append((name, f"{label} {_text(name, stored)} stored, {_text(name, local)} here"))
        return out


def _text(name: str, value: str | None) -> str:
    if value is None:
        return "none"
    return value[:12] if name == "torch_git" else value
