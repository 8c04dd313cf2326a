"""GraphModule serialization with stable bytes.

A `torch.fx.GraphModule` reduces to its generated Python source plus its
instance dictionary (parameters, buffers, submodules, flags) and an import
block. We keep exactly that, but pickle it through `precompile.pickling`, so
the same graph always gives the same bytes: sets are ordered, node metadata
(stack traces, fake values) is dropped, and tensors become blobs of their own.
Equal graphs therefore get equal digests, and shared constants are stored once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from . import pickling
from ._torch import SerializedGraphModule

__all__ = [
    "deserialize_graph_module",
    "serialize_graph_module",
    "serialized_from_bytes",
    "serialized_to_bytes",
]

_MAGIC = "precompile-graph-module/1"


def _reduce(gm: torch.fx.GraphModule) -> tuple[Any, tuple[Any, ...]]:
    # Metadata holds fake tensors and source locations: neither is needed to
    # rebuild the module, and both would make equal graphs differ.
    gm.meta = {}
    for node in gm.graph.nodes:
        node.meta = {}
    fn, args = gm.__reduce__()
    return fn, args


def serialize_graph_module(gm: torch.fx.GraphModule) -> tuple[bytes, list[bytes]]:
    """Encode `gm`; returns the module record and its out-of-band parts.

    Clears the metadata of `gm` and its nodes, as torch's own
    `serialize_graph_module` does.
    """
    fn, args = _reduce(gm)
    return pickling.dumps((_MAGIC, fn, args))


def deserialize_graph_module(record: Any, parts: Sequence[Any] = ()) -> torch.fx.GraphModule:
    """Rebuild the GraphModule `serialize_graph_module` encoded."""
    return serialized_from_bytes(record, parts).deserialize()


def serialized_to_bytes(serialized: SerializedGraphModule) -> tuple[bytes, list[bytes]]:
    """Encode torch's `SerializedGraphModule` (what AOTAutograd results carry)."""
    return pickling.dumps((_MAGIC, serialized.fn, serialized.args))


def serialized_from_bytes(record: Any, parts: Sequence[Any] = ()) -> SerializedGraphModule:
    """Rebuild a `SerializedGraphModule` without tracing its code yet.

    torch only turns it into a module when compiled autograd asks for it, so
    loading stays cheap.
    """
    magic, fn, args = pickling.loads(record, parts)
    if magic != _MAGIC:
        raise ValueError(f"not a serialized graph module (found {magic!r})")
    out = SerializedGraphModule.__new__(SerializedGraphModule)
    out.fn = fn
    out.args = args
    return out
