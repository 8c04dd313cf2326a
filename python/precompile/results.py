"""AOTAutograd results in store form.

torch pickles a `BundledAOTAutogradResult` (forward and backward
`CompiledFxGraph`, generated source, Triton kernel files, backward graph
module) into one blob per backend, so nothing is shared between graphs. Here
each part that can repeat is a blob of its own and each result is a manifest
of them:

    backend manifest  -> skeleton, forward graph, backward graph,
                         backward GraphModule
    graph manifest    -> skeleton, generated source, strings, constants,
                         Triton files, C++ kernel libraries

A skeleton is the torch object with those parts taken out, pickled
deterministically. Fields that only record how long compilation took are
zeroed: they feed logs, and keeping them would make every compile unique.
Equal parts therefore hash equal and are stored once, across graphs,
recompiles, functions and models.

Reading an entry takes its manifests first, then every blob the load path
needs in one batched, verified read, before anything is unpickled;
materializing rebuilds the exact torch objects.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import zlib
from collections.abc import Sequence
from typing import Any

from . import graph as graph_codec
from . import kernels, pickling
from ._torch_compat import (
    BundledAOTAutogradResult,
    CompiledFxGraph,
    TritonBundle,
    TritonKernelArtifact,
    TritonKernelArtifacts,
    inductor_cache_dir,
    kernel_capture,
    register_library,
)

__all__ = [
    "StoredBackend",
    "StoredGraph",
    "binding_children",
    "get_many",
    "load_pickled",
    "pickled_children",
    "put_binding",
    "put_pickled",
]

GRAPH_KIND = "precompile/fx-graph"
BACKEND_KIND = "precompile/aot-backend"
PICKLED_KIND = "precompile/pickled"

_GRAPH_TEXT_FIELDS = (
    "source_code",
    "runnable_graph_str",
    "inductor_post_grad_graph_str",
    "inductor_provenance_mapping_str",
    "inductor_provenance_stack_traces_str",
)
_GRAPH_JSON_FIELDS = ("_fx_graph_cache_debug_lines",)
# Read on the load path as they are: everything else is a listing or debug
# text, kept compressed (see `_pack`).
_HOT_FIELDS = ("source_code",)
_ZLIB_MAGIC = b"\x00precompile-zlib\x00"
_GRAPH_TIME_FIELDS = ("_time_taken_ns",)
_BACKEND_TEXT_FIELDS = (
    "aot_joint_graph_str",
    "aot_forward_graph_str",
    "aot_backward_graph_str",
    "min_cut_info_str",
)
_BACKEND_TIME_FIELDS = ("forward_time_taken_ns", "backward_time_taken_ns")


def read_manifest(store: Any, digest: str) -> tuple[list[str], dict[str, Any]]:
    children, meta = store.get_manifest(digest)
    return list(children), dict(meta)


def put_pickled(store: Any, obj: Any) -> dict[str, Any]:
    """Store `obj` as a deterministic pickle plus its out-of-band parts."""
    record, parts = pickling.dumps(obj)
    return {"record": store.put(record), "parts": [store.put(p) for p in parts]}


def load_pickled(ref: dict[str, Any], blobs: dict[str, Any]) -> Any:
    """Unpickle a `put_pickled` reference from blobs already read."""
    return pickling.loads(blobs[ref["record"]], [blobs[d] for d in ref["parts"]])


def get_many(store: Any, digests: list[str]) -> dict[str, Any]:
    """Read (and verify) `digests` in one batch where the store can."""
    unique = list(dict.fromkeys(digests))
    batch = getattr(store, "get_many", None)
    blobs = batch(unique) if batch is not None else [store.get(d) for d in unique]
    return dict(zip(unique, blobs))


def pickled_children(ref: dict[str, Any] | None) -> list[str]:
    """The blobs a `put_pickled` reference names."""
    return [] if ref is None else [ref["record"], *ref["parts"]]


def _pack(data: bytes) -> bytes:
    """Compress a blob that loading never reads, or reads only to keep.

    Triton IR and PTX, graph listings and cache-key debug lines are most of a
    GPU entry's bytes and compress several times over; the generated source
    and the kernel binaries stay as they are, so the load path maps them
    without decoding. The marker starts with NUL, which no text torch writes
    does, so a packed blob is never mistaken for a plain one.
    """
    return _ZLIB_MAGIC + zlib.compress(data, 6)


def _unpack(blob: Any) -> bytes:
    raw = bytes(blob)
    if raw.startswith(_ZLIB_MAGIC):
        return zlib.decompress(raw[len(_ZLIB_MAGIC) :])
    return raw


def _put_fields(
    store: Any, obj: Any, text: Sequence[str], as_json: Sequence[str] = ()
) -> dict[str, str]:
    out = {}
    for name in (*text, *as_json):
        value = getattr(obj, name, None)
        if name in as_json and value is not None:
            data = json.dumps(value).encode()
        elif isinstance(value, str):
            data = value.encode()
        else:
            continue
        out[name] = store.put(data if name in _HOT_FIELDS else _pack(data))
    return out


def _restore_fields(obj: Any, blobs: dict[str, Any], as_json: Sequence[str] = ()) -> None:
    for name, blob in blobs.items():
        raw = _unpack(blob)
        setattr(obj, name, json.loads(raw) if name in as_json else raw.decode())


def _zero(obj: Any, names: Sequence[str]) -> None:
    for name in names:
        if hasattr(obj, name):
            setattr(obj, name, 0)


@dataclasses.dataclass(frozen=True)
class StoredGraph:
    """A `CompiledFxGraph` in store form: its manifest, and the blobs read for it.

    `blobs` maps digests to verified blobs; it is shared by everything read
    for one entry and filled by one batched read (see `entries.fetch_entry`).
    """

    digest: str
    meta: dict[str, Any]
    blobs: dict[str, Any]

    @staticmethod
    def put(store: Any, graph: CompiledFxGraph) -> str:
        """Store `graph`; returns its manifest digest."""
        fields = _put_fields(store, graph, _GRAPH_TEXT_FIELDS, _GRAPH_JSON_FIELDS)
        triton_meta, static_ref = [], None
        bundle = getattr(graph, "_triton_bundle", None)
        if bundle is not None:
            for kernel in bundle.kernel_artifacts:
                files = []
                for artifact in kernel.artifacts:
                    load_digest = None
                    if kernels.is_load_file(artifact.filename):
                        digest = store.put(artifact.payload)
                        load_digest = digest
                        if artifact.filename.startswith("__grp__"):
                            load_digest = store.put(kernels.trim_group_file(artifact.payload))
                    else:
                        # IR, PTX and the kernel source: kept, never loaded.
                        digest = store.put(_pack(artifact.payload))
                    files.append([artifact.filename, digest, load_digest])
                triton_meta.append(
                    {"hash": kernel.kernel_hash, "device": kernel.device, "files": files}
                )
            if bundle.static_autotuners:
                static_ref = put_pickled(store, list(bundle.static_autotuners))
        cache_dir = inductor_cache_dir()
        libraries = []
        for path, key, cache_class in kernel_capture.libraries_for(graph.cache_key):
            rel = kernels.library_relpath(path, cache_dir)
            if rel is not None:
                libraries.append([rel, store.put_file(path), key, cache_class])

        skeleton = copy.copy(graph)
        for name in (*fields, "_triton_bundle"):
            setattr(skeleton, name, None)
        _zero(skeleton, _GRAPH_TIME_FIELDS)
        skel_ref = put_pickled(store, skeleton)

        children = pickled_children(skel_ref) + list(fields.values())
        for kernel in triton_meta:
            for _, digest, load_digest in kernel["files"]:
                children.append(digest)
                if load_digest is not None:
                    children.append(load_digest)
        children += pickled_children(static_ref) + [lib[1] for lib in libraries]
        meta = {
            "kind": GRAPH_KIND,
            "skeleton": skel_ref,
            "fields": fields,
            "triton": triton_meta,
            "static_autotuners": static_ref,
            "libraries": libraries,
        }
        return store.put_manifest(sorted(set(children)), meta)

    @classmethod
    def read(cls, store: Any, digest: str, blobs: dict[str, Any]) -> StoredGraph:
        """Read and check the manifest; the blobs come later, in one batch."""
        _, meta = read_manifest(store, digest)
        if meta.get("kind") != GRAPH_KIND:
            raise ValueError(f"{digest} is not a stored graph")
        for lib in meta["libraries"]:
            kernels.validate_library_path(lib[0])
        return cls(digest=digest, meta=meta, blobs=blobs)

    def needed(self) -> list[str]:
        """What loading reads: everything but the Triton IR."""
        meta = self.meta
        out = pickled_children(meta["skeleton"]) + list(meta["fields"].values())
        for kernel in meta["triton"]:
            out += [load for _, _, load in kernel["files"] if load is not None]
        out += pickled_children(meta.get("static_autotuners"))
        return out + [lib[1] for lib in meta["libraries"]]

    def place_libraries(self, cache_dir: str) -> None:
        """Put the C++ kernel libraries where Inductor's loader finds them."""
        for rel, digest, key, cache_class in self.meta["libraries"]:
            kernels.place_library(cache_dir, rel, self.blobs[digest])
            register_library(cache_class, key, os.path.join(cache_dir, rel))

    def materialize(self) -> CompiledFxGraph:
        """A fresh `CompiledFxGraph`, as torch had it before saving."""
        meta, blobs = self.meta, self.blobs
        graph = load_pickled(meta["skeleton"], blobs)
        _restore_fields(graph, {n: blobs[d] for n, d in meta["fields"].items()}, _GRAPH_JSON_FIELDS)
        static = meta.get("static_autotuners")
        if meta["triton"] or static is not None:
            graph._triton_bundle = TritonBundle(
                kernel_artifacts=[
                    TritonKernelArtifacts(
                        kernel_hash=kernel["hash"],
                        device=int(kernel["device"]),
                        artifacts=[
                            TritonKernelArtifact(name, bytes(blobs[load]))
                            for name, _, load in kernel["files"]
                            if load is not None
                        ],
                    )
                    for kernel in meta["triton"]
                ],
                static_autotuners=[] if static is None else load_pickled(static, blobs),
            )
        return graph


def put_binding(store: Any, result: BundledAOTAutogradResult) -> dict[str, Any]:
    """The per-use part of a result: its AOT id and its graph listings.

    Two functions that compile to the same backend differ only here: the
    listings name the user's source lines, and the id counts compilations
    in the process. Kept in the entry rather than the backend manifest, they
    leave equal backends with equal digests.
    """
    config = result.sanitized_aot_config
    return {
        "aot_id": getattr(config, "aot_id", None),
        "fields": _put_fields(store, result, _BACKEND_TEXT_FIELDS),
    }


def binding_children(binding: dict[str, Any]) -> list[str]:
    return list(binding["fields"].values())


@dataclasses.dataclass(frozen=True)
class StoredBackend:
    """A `BundledAOTAutogradResult` in store form, as used once (its binding)."""

    digest: str
    meta: dict[str, Any]
    forward: StoredGraph
    backward: StoredGraph | None
    binding: dict[str, Any]
    blobs: dict[str, Any]

    @staticmethod
    def put(store: Any, result: BundledAOTAutogradResult) -> str:
        """Store the shareable part of `result`; returns its manifest digest."""
        fw = StoredGraph.put(store, result.compiled_fw.result)
        bw = None
        if result.compiled_bw is not None:
            bw = StoredGraph.put(store, result.compiled_bw.result)
        bw_module = None
        if result.serialized_bw_module is not None:
            record, parts = graph_codec.serialized_to_bytes(result.serialized_bw_module)
            bw_module = {"record": store.put(record), "parts": [store.put(p) for p in parts]}

        skeleton = copy.copy(result)
        skeleton.compiled_fw = copy.copy(result.compiled_fw)
        skeleton.compiled_fw.result = None
        if result.compiled_bw is not None:
            skeleton.compiled_bw = copy.copy(result.compiled_bw)
            skeleton.compiled_bw.result = None
        skeleton.serialized_bw_module = None
        # The AOT id counts compilations in the process (it travels in the
        # binding); the backend id names this use (torch clears it on save,
        # though not in every release). Neither belongs to what is shared.
        skeleton.sanitized_aot_config = copy.copy(result.sanitized_aot_config)
        for name, value in (("aot_id", 0), ("precompile_backend_id", None)):
            if hasattr(skeleton.sanitized_aot_config, name):
                setattr(skeleton.sanitized_aot_config, name, value)
        for name in _BACKEND_TEXT_FIELDS:
            if hasattr(skeleton, name):
                setattr(skeleton, name, None)
        _zero(skeleton, _BACKEND_TIME_FIELDS)
        skel_ref = put_pickled(store, skeleton)

        children = pickled_children(skel_ref) + [fw] + ([bw] if bw else [])
        children += pickled_children(bw_module)
        meta = {
            "kind": BACKEND_KIND,
            "skeleton": skel_ref,
            "forward": fw,
            "backward": bw,
            "bw_module": bw_module,
        }
        return store.put_manifest(sorted(set(children)), meta)

    @classmethod
    def read(
        cls, store: Any, digest: str, binding: dict[str, Any], blobs: dict[str, Any]
    ) -> StoredBackend:
        """Read and check the manifests; the blobs come later, in one batch."""
        _, meta = read_manifest(store, digest)
        if meta.get("kind") != BACKEND_KIND:
            raise ValueError(f"{digest} is not a stored AOTAutograd result")
        backward = meta["backward"]
        return cls(
            digest=digest,
            meta=meta,
            forward=StoredGraph.read(store, meta["forward"], blobs),
            backward=None if backward is None else StoredGraph.read(store, backward, blobs),
            binding=binding,
            blobs=blobs,
        )

    def needed(self) -> list[str]:
        """What loading reads of the shared part (each use adds its binding)."""
        out = pickled_children(self.meta["skeleton"]) + pickled_children(self.meta["bw_module"])
        out += self.forward.needed()
        return out + (self.backward.needed() if self.backward is not None else [])

    def with_binding(self, binding: dict[str, Any]) -> StoredBackend:
        """The same backend as used elsewhere: shares everything but the binding."""
        return dataclasses.replace(self, binding=binding)

    def binding_meta(self) -> dict[str, Any]:
        return self.binding

    def place_libraries(self, cache_dir: str) -> None:
        self.forward.place_libraries(cache_dir)
        if self.backward is not None:
            self.backward.place_libraries(cache_dir)

    def materialize(self) -> BundledAOTAutogradResult:
        """A fresh `BundledAOTAutogradResult`, as torch recorded it."""
        blobs = self.blobs
        result = load_pickled(self.meta["skeleton"], blobs)
        _restore_fields(result, {n: blobs[d] for n, d in self.binding["fields"].items()})
        aot_id = self.binding.get("aot_id")
        if aot_id is not None and hasattr(result.sanitized_aot_config, "aot_id"):
            result.sanitized_aot_config.aot_id = aot_id
        result.compiled_fw.result = self.forward.materialize()
        if self.backward is not None:
            result.compiled_bw.result = self.backward.materialize()
        bw_module = self.meta["bw_module"]
        if bw_module is not None:
            result.serialized_bw_module = graph_codec.serialized_from_bytes(
                blobs[bw_module["record"]], [blobs[p] for p in bw_module["parts"]]
            )
        return result
