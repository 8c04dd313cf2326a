"""Inductor's compiled graphs: the private fields the store saves apart, and the Triton bundle a graph carries."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from torch._inductor.output_code import CompiledFxGraph
from torch._inductor.triton_bundler import TritonBundle, TritonKernelArtifact, TritonKernelArtifacts

__all__ = [
    "CompiledFxGraph",
    "GRAPH_JSON_FIELDS",
    "GRAPH_TIME_FIELDS",
    "TRITON_BUNDLE_FIELD",
    "set_triton_bundle",
    "triton_bundle",
]

# `CompiledFxGraph` fields kept as JSON blobs of their own rather than in the
# pickled skeleton (the FX graph cache's debug lines).
GRAPH_JSON_FIELDS: tuple[str, ...] = ("_fx_graph_cache_debug_lines",)
# `CompiledFxGraph` fields that time this compile: zeroed in the stored
# skeleton, so equal graphs compiled at other speeds share one blob.
GRAPH_TIME_FIELDS: tuple[str, ...] = ("_time_taken_ns",)
# The field holding the graph's Triton kernels, stored apart and cleared in
# the skeleton.
TRITON_BUNDLE_FIELD = "_triton_bundle"


def triton_bundle(graph: CompiledFxGraph) -> TritonBundle | None:
    """The Triton kernels `graph` carries, or None (a CPU graph)."""
    return getattr(graph, TRITON_BUNDLE_FIELD, None)


def set_triton_bundle(
    graph: CompiledFxGraph,
    kernels: Iterable[tuple[str, int, Sequence[tuple[str, bytes]]]],
    static_autotuners: list[Any],
) -> None:
    """Give `graph` a Triton bundle of `(kernel hash, device, [(file name, bytes)])` kernels."""
    bundle = TritonBundle(
        kernel_artifacts=[
            TritonKernelArtifacts(
                kernel_hash=kernel_hash,
                device=device,
                artifacts=[TritonKernelArtifact(name, data) for name, data in files],
            )
            for kernel_hash, device, files in kernels
        ],
        static_autotuners=static_autotuners,
    )
    setattr(graph, TRITON_BUNDLE_FIELD, bundle)
