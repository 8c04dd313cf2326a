"""Deterministic pickling with tensors kept out of the pickle.

Content addressing only dedups what serializes to the same bytes. Plain
pickle falls short of that in two ways that matter for torch objects:

- sets pickle in hash order, which changes with PYTHONHASHSEED from one
  process to the next;
- tensors pickle through `torch.save`, whose archive carries a random
  serialization id.

`dumps` sorts set members and moves each tensor into a part of its own (raw
bytes behind a small JSON header), as it does with long strings and bytes
(the module sources a Dynamo entry holds, for one). Parts are stored as
blobs, so equal constants and texts shared by different graphs and entries
are stored once.
"""

from __future__ import annotations

import ctypes
import io
import json
import pickle
import struct
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["dumps", "loads", "encode_tensor", "decode_tensor"]

_PROTOCOL = 4
_TENSOR_MAGIC = b"precompile-tensor\n"
# Texts at least this long become parts of their own, shared by content.
_OUT_OF_BAND = 8 * 1024


def encode_tensor(t: torch.Tensor) -> bytes:
    """A tensor's dtype, shape, strides and bytes, in a stable encoding."""
    base = t.detach()
    header: dict[str, Any] = {
        "dtype": str(base.dtype).removeprefix("torch."),
        "shape": list(base.shape),
        "stride": list(base.stride()),
        "device": str(base.device),
        "requires_grad": bool(t.requires_grad),
        "parameter": isinstance(t, torch.nn.Parameter),
    }
    if base.device.type == "meta":
        data = b""
    else:
        dense = base.to("cpu").contiguous()
        nbytes = dense.numel() * dense.element_size()
        data = ctypes.string_at(dense.data_ptr(), nbytes) if nbytes else b""
    head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    return _TENSOR_MAGIC + head + b"\n" + data


def decode_tensor(blob: Any) -> torch.Tensor:
    """Inverse of `encode_tensor`; the result owns writable memory."""
    view = memoryview(blob)
    if bytes(view[: len(_TENSOR_MAGIC)]) != _TENSOR_MAGIC:
        raise ValueError("not an encoded tensor")
    end = bytes(view[len(_TENSOR_MAGIC) : len(_TENSOR_MAGIC) + 4096]).index(b"\n")
    start = len(_TENSOR_MAGIC)
    header = json.loads(bytes(view[start : start + end]))
    payload = view[start + end + 1 :]
    dtype = getattr(torch, header["dtype"])
    shape, stride = header["shape"], header["stride"]
    device = torch.device(header["device"])
    if device.type == "meta":
        out = torch.empty_strided(shape, stride, dtype=dtype, device="meta")
    else:
        if len(payload):
            flat = torch.frombuffer(bytearray(payload), dtype=dtype)
        else:
            flat = torch.empty(0, dtype=dtype)
        dense = flat.reshape(shape)
        out = torch.empty_strided(shape, stride, dtype=dtype)
        out.copy_(dense)
        if device.type != "cpu":
            out = out.to(device)
    if header["parameter"]:
        return torch.nn.Parameter(out, requires_grad=header["requires_grad"])
    if header["requires_grad"]:
        out.requires_grad_(True)
    return out


def _plain_tensor(obj: Any) -> bool:
    # Subclasses (FakeTensor, functional wrappers, DTensor...) carry state a
    # byte copy would drop; they keep their own pickling.
    return type(obj) in (torch.Tensor, torch.nn.Parameter)


def _sort_key(item: Any) -> tuple[str, str]:
    return (type(item).__qualname__, repr(item))


class _Pickler(pickle._Pickler):  # type: ignore[name-defined,misc]
    # The C pickler never consults reducer_override or a dispatch table for
    # exact sets, so the Python pickler is used, with set handlers that
    # write members in a stable order. What it pickles is small: tensors and
    # source text are kept out of the pickle.
    dispatch = dict(pickle._Pickler.dispatch)  # type: ignore[attr-defined]

    def __init__(self, file: io.BytesIO, parts: list[bytes]) -> None:
        super().__init__(file, protocol=_PROTOCOL)
        self._parts = parts
        self._seen: dict[Any, int] = {}
        self._by_value: dict[tuple[type, str | bytes], int] = {}

    def _save_set(self, obj: Any) -> None:
        self.save_reduce(type(obj), (sorted(obj, key=_sort_key),), obj=obj)

    # Pickle memoizes by object identity, so two equal strings write
    # differently depending on whether they happen to be one object (a
    # back-reference) or two (the text again). Strings and bytes are
    # immutable, so they are memoized by value instead: the bytes depend on
    # values only, and a long text (a module's source, which Dynamo entries
    # hold once per inlined function) is still written once.
    def _save_text(self, obj: str | bytes) -> None:
        key = (type(obj), obj)
        index = self._by_value.get(key)
        if index is not None:
            self.write(self.get(index))
            return
        if isinstance(obj, str):
            data = obj.encode("utf-8", "surrogatepass")
            short, mid, large = pickle.SHORT_BINUNICODE, pickle.BINUNICODE, pickle.BINUNICODE8
        else:
            data = bytes(obj)
            short, mid, large = pickle.SHORT_BINBYTES, pickle.BINBYTES, pickle.BINBYTES8
        n = len(data)
        if n <= 0xFF:
            header = short + struct.pack("<B", n)
        elif n <= 0xFFFFFFFF:
            header = mid + struct.pack("<I", n)
        else:
            header = large + struct.pack("<Q", n)
        if n >= self.framer._FRAME_SIZE_TARGET:
            self._write_large_bytes(header, data)
        else:
            self.write(header + data)
        self._by_value[key] = len(self.memo)
        self.memoize(obj)

    dispatch[set] = _save_set
    dispatch[frozenset] = _save_set
    dispatch[str] = _save_text
    dispatch[bytes] = _save_text

    def _part(self, key: Any, encode: Any) -> int:
        index = self._seen.get(key)
        if index is None:
            index = len(self._parts)
            self._parts.append(encode())
            self._seen[key] = index
        return index

    def persistent_id(self, obj: Any) -> Any:
        if _plain_tensor(obj):
            return ("tensor", self._part(id(obj), lambda: encode_tensor(obj)))
        kind = type(obj)
        if (kind is str or kind is bytes) and len(obj) >= _OUT_OF_BAND:
            data = obj.encode("utf-8", "surrogatepass") if kind is str else obj
            return (kind.__name__, self._part((kind, obj), lambda: data))
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, parts: Sequence[Any]) -> None:
        super().__init__(file)
        self._parts = parts
        self._decoded: dict[int, Any] = {}

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) == 2 and pid[0] in _DECODERS):
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        kind, index = pid
        if not isinstance(index, int) or not 0 <= index < len(self._parts):
            raise pickle.UnpicklingError(f"part index {index!r} out of range")
        if index not in self._decoded:
            self._decoded[index] = _DECODERS[kind](self._parts[index])
        return self._decoded[index]


_DECODERS = {
    "tensor": decode_tensor,
    "str": lambda blob: bytes(blob).decode("utf-8", "surrogatepass"),
    "bytes": bytes,
}


def dumps(obj: Any) -> tuple[bytes, list[bytes]]:
    """Pickle `obj`; returns the pickle and the parts (tensors, long texts)
    it refers to."""
    buf = io.BytesIO()
    parts: list[bytes] = []
    _Pickler(buf, parts).dump(obj)
    return buf.getvalue(), parts


def loads(data: Any, parts: Sequence[Any] = ()) -> Any:
    """Unpickle what `dumps` produced; `parts` are its parts, in order."""
    return _Unpickler(io.BytesIO(memoryview(data)), parts).load()
