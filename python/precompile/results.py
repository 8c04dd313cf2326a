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

Fetching reads and verifies every blob the load path needs before anything
is unpickled; materializing rebuilds the exact torch objects.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
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
    "fetch_pickled",
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


def fetch_pickled(store: Any, ref: dict[str, Any]) -> tuple[Any, list[Any]]:
    """The verified blobs behind a `put_pickled` reference."""
    return store.get(ref["record"]), [store.get(d) for d in ref["parts"]]


def _pickled_children(ref: dict[str, Any] | None) -> list[str]:
    return [] if ref is None else [ref["record"], *ref["parts"]]


def _put_fields(
    store: Any, obj: Any, text: Sequence[str], as_json: Sequence[str] = ()
) -> dict[str, str]:
    out = {}
    for name in text:
        value = getattr(obj, name, None)
        if isinstance(value, str):
            out[name] = store.put(value.encode())
    for name in as_json:
        value = getattr(obj, name, None)
        if value is not None:
            out[name] = store.put(json.dumps(value).encode())
    return out


def _restore_fields(obj: Any, blobs: dict[str, Any], as_json: Sequence[str] = ()) -> None:
    for name, blob in blobs.items():
        raw = bytes(blob)
        setattr(obj, name, json.loads(raw) if name in as_json else raw.decode())


def _zero(obj: Any, names: Sequence[str]) -> None:
    for name in names:
        if hasattr(obj, name):
            setattr(obj, name, 0)


@dataclasses.dataclass(frozen=True)
class StoredGraph:
    """A `CompiledFxGraph` in store form, with its load-path blobs verified."""

    digest: str
    skeleton: Any
    parts: list[Any]
    fields: dict[str, Any]
    triton: list[tuple[str, int, list[tuple[str, Any]]]]
    static_autotuners: tuple[Any, list[Any]] | None
    libraries: list[tuple[str, Any, str, str]]

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
                    digest = store.put(artifact.payload)
                    load_digest = None
                    if artifact.filename.startswith("__grp__"):
                        load_digest = store.put(kernels.trim_group_file(artifact.payload))
                    elif kernels.is_load_file(artifact.filename):
                        load_digest = digest
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

        children = _pickled_children(skel_ref) + list(fields.values())
        for kernel in triton_meta:
            for _, digest, load_digest in kernel["files"]:
                children.append(digest)
                if load_digest is not None:
                    children.append(load_digest)
        children += _pickled_children(static_ref) + [lib[1] for lib in libraries]
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
    def fetch(cls, store: Any, digest: str) -> StoredGraph:
        """Read and verify what loading `digest` needs; IR files are not read."""
        _, meta = read_manifest(store, digest)
        if meta.get("kind") != GRAPH_KIND:
            raise ValueError(f"{digest} is not a stored graph")
        skeleton, parts = fetch_pickled(store, meta["skeleton"])
        triton = []
        for kernel in meta["triton"]:
            files = [
                (name, store.get(load_digest))
                for name, _, load_digest in kernel["files"]
                if load_digest is not None
            ]
            triton.append((kernel["hash"], int(kernel["device"]), files))
        static = meta.get("static_autotuners")
        return cls(
            digest=digest,
            skeleton=skeleton,
            parts=parts,
            fields={name: store.get(d) for name, d in meta["fields"].items()},
            triton=triton,
            static_autotuners=None if static is None else fetch_pickled(store, static),
            libraries=[
                (kernels.validate_library_path(rel), store.get(d), key, cache_class)
                for rel, d, key, cache_class in meta["libraries"]
            ],
        )

    def place_libraries(self, cache_dir: str) -> None:
        """Put the C++ kernel libraries where Inductor's loader finds them."""
        for rel, blob, key, cache_class in self.libraries:
            kernels.place_library(cache_dir, rel, blob)
            register_library(cache_class, key, os.path.join(cache_dir, rel))

    def materialize(self) -> CompiledFxGraph:
        """A fresh `CompiledFxGraph`, as torch had it before saving."""
        graph = pickling.loads(self.skeleton, self.parts)
        _restore_fields(graph, self.fields, _GRAPH_JSON_FIELDS)
        if self.triton or self.static_autotuners is not None:
            statics = []
            if self.static_autotuners is not None:
                statics = pickling.loads(*self.static_autotuners)
            graph._triton_bundle = TritonBundle(
                kernel_artifacts=[
                    TritonKernelArtifacts(
                        kernel_hash=h,
                        device=device,
                        artifacts=[TritonKernelArtifact(name, bytes(b)) for name, b in files],
                    )
                    for h, device, files in self.triton
                ],
                static_autotuners=statics,
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
    """A `BundledAOTAutogradResult` in store form, with its blobs verified."""

    digest: str
    skeleton: Any
    parts: list[Any]
    forward: StoredGraph
    backward: StoredGraph | None
    bw_module: tuple[Any, list[Any]] | None
    aot_id: int | None
    fields: dict[str, Any]

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

        children = _pickled_children(skel_ref) + [fw] + ([bw] if bw else [])
        children += _pickled_children(bw_module)
        meta = {
            "kind": BACKEND_KIND,
            "skeleton": skel_ref,
            "forward": fw,
            "backward": bw,
            "bw_module": bw_module,
        }
        return store.put_manifest(sorted(set(children)), meta)

    @classmethod
    def fetch(cls, store: Any, digest: str, binding: dict[str, Any]) -> StoredBackend:
        """Read and verify everything loading this backend in one use needs."""
        _, meta = read_manifest(store, digest)
        if meta.get("kind") != BACKEND_KIND:
            raise ValueError(f"{digest} is not a stored AOTAutograd result")
        skeleton, parts = fetch_pickled(store, meta["skeleton"])
        bw_module = meta.get("bw_module")
        return cls(
            digest=digest,
            skeleton=skeleton,
            parts=parts,
            forward=StoredGraph.fetch(store, meta["forward"]),
            backward=None if meta["backward"] is None else StoredGraph.fetch(store, meta["backward"]),
            bw_module=None if bw_module is None else fetch_pickled(store, bw_module),
            aot_id=binding.get("aot_id"),
            fields={name: store.get(d) for name, d in binding.get("fields", {}).items()},
        )

    def with_binding(self, store: Any, binding: dict[str, Any]) -> StoredBackend:
        """The same backend as used elsewhere: shares everything but the binding."""
        return dataclasses.replace(
            self,
            aot_id=binding.get("aot_id"),
            fields={name: store.get(d) for name, d in binding.get("fields", {}).items()},
        )

    def binding_meta(self) -> dict[str, Any]:
        return {"aot_id": self.aot_id, "fields": {n: b.digest for n, b in self.fields.items()}}

    def place_libraries(self, cache_dir: str) -> None:
        self.forward.place_libraries(cache_dir)
        if self.backward is not None:
            self.backward.place_libraries(cache_dir)

    def materialize(self) -> BundledAOTAutogradResult:
        """A fresh `BundledAOTAutogradResult`, as torch recorded it."""
        result = pickling.loads(self.skeleton, self.parts)
        _restore_fields(result, self.fields)
        if self.aot_id is not None and hasattr(result.sanitized_aot_config, "aot_id"):
            result.sanitized_aot_config.aot_id = self.aot_id
        result.compiled_fw.result = self.forward.materialize()
        if self.backward is not None:
            result.compiled_bw.result = self.backward.materialize()
        if self.bw_module is not None:
            result.serialized_bw_module = graph_codec.serialized_from_bytes(*self.bw_module)
        return result
