"""What a compiled function's key is made of, so a miss can say which part changed.

torch files a compiled function under a digest of its qualified name and
first line (`source_id_from_fn`), and the store files that under the
environment's id (`environment`). A digest says nothing about what it was
made from: an edit above the function, an edit in it, another checkout or
another torch all look alike, `not_stored`. Each entry therefore records the
parts (`KeyParts`: module, qualified name, source file, first line, and a
digest of the function's code that no line number enters), and the store
keeps, per function, a small index ref `host/fn/<fn-id>` (fn-id: a digest of
module and qualified name) naming the parts of the function's last saved
entry and that entry's ref. A miss reads that one ref and compares
(`differences`). Torch-free: the command line reads these records too.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from ._core import FormatError, blake3_hex
from .paths import HOST_LOCAL_PREFIX

__all__ = ["INDEX_PREFIX", "KeyParts", "code_digest", "index_ref"]

# Under `host/`: `ls`, `push` and `export` leave the index out unless named.
INDEX_PREFIX = f"{HOST_LOCAL_PREFIX}fn/"

# Each part, in the words a miss names it by (the factor names of `explain`).
SOURCE = "source"
LINE = "line"
FILE = "file"


@dataclasses.dataclass(frozen=True)
class KeyParts:
    """`module` and `qualname` name the function (its index ref); `file` and
    `line` are where its code was; `code` digests its code without line
    numbers or file name (`code_digest`): equal code, equal digest."""

    module: str | None
    qualname: str | None
    file: str | None
    line: int | None
    code: str | None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: Any) -> KeyParts:
        if not isinstance(doc, Mapping):
            raise FormatError("key_parts is not an object")
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            value = doc.get(field.name)
            kind = int if field.name == "line" else str
            if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
                raise FormatError(f"key_parts field {field.name!r} is not {kind.__name__} or null")
            values[field.name] = value
        return cls(**values)

    def differences(self, here: KeyParts) -> list[tuple[str, str]]:
        """How these (stored) parts differ from `here`'s: (factor, text).

        Only parts both sides know are compared: an unknown part (a function
        whose code could not be read) is never reported as changed.
        """
        out = []
        if self.code and here.code and self.code != here.code:
            out.append((SOURCE, "stored entry compiled from other source (the function's code differs)"))
        if self.line is not None and here.line is not None and self.line != here.line:
            out.append((LINE, f"defined at line {self.line} when stored, line {here.line} here"))
        if self.file and here.file and self.file != here.file:
            out.append((FILE, f"source file {self.file} stored, {here.file} here"))
        return out


def fn_id(module: str | None, qualname: str | None) -> str | None:
    if not module or not qualname:
        return None
    return blake3_hex(f"{module}\0{qualname}".encode())[:32]


def index_ref(parts: KeyParts) -> str | None:
    """The index ref of the function `parts` describe (None: it has no name)."""
    ident = fn_id(parts.module, parts.qualname)
    return None if ident is None else f"{INDEX_PREFIX}{ident}"


def code_digest(code: Any) -> str | None:
    """A digest of a code object's instructions, names and constants, nested
    codes included, without its file name or line numbers: the same function
    moved in its file or to another checkout digests the same; an edit to it
    does not. Takes a live code object or torch's serialized one (both carry
    the `co_*` fields). None when `code` has none of them."""
    try:
        return blake3_hex(json.dumps(_code_doc(code), sort_keys=True).encode())
    except (AttributeError, TypeError, ValueError, RecursionError):
        return None


def _code_doc(code: Any) -> list[Any]:
    raw = code.co_code
    return [
        raw.hex() if isinstance(raw, (bytes, bytearray)) else repr(raw),
        list(code.co_names),
        list(code.co_varnames),
        [code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags],
        [_const(c) for c in code.co_consts],
    ]


def _const(value: Any) -> Any:
    if hasattr(value, "co_code"):
        return ["code", _code_doc(value)]
    if isinstance(value, (tuple, list)):
        return ["seq", [_const(v) for v in value]]
    if isinstance(value, frozenset):
        # A set literal's order follows string hashing, which varies by process.
        return ["set", sorted(json.dumps(_const(v)) for v in value)]
    return repr(value)
