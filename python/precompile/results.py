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
from ._torch import (
    GRAPH_JSON_FIELDS,
    GRAPH_TIME_FIELDS,
    TRITON_BUNDLE_FIELD,
    BundledAOTAutogradResult,
    CompiledFxGraph,
    autotune_capture,
    inductor_cache_dir,
    kernel_capture,
    local_static_autotuners,
    picklable_triton_bundle,
    portable_static_autotuners,
    register_library,
    set_triton_bundle,
    triton_bundle,
    with_coordesc_winners,
)
from .protocols import BatchRead, ReadStore, WriteStore
from .schema import (
    AutotuneRef,
    BackendMeta,
    Binding,
    GraphMeta,
    LibraryRef,
    PickledRef,
    TritonFile,
    TritonKernelRef,
)

__all__ = [
    "StoredBackend",
    "StoredGraph",
    "get_many",
    "load_pickled",
    "put_binding",
    "put_pickled",
    "read_manifest",
]

_GRAPH_TEXT_FIELDS = (
    "source_code",
    "runnable_graph_str",
    "inductor_post_grad_graph_str",
    "inductor_provenance_mapping_str",
    "inductor_provenance_stack_traces_str",
)
# Read on the load path as they are: everything else is a listing or debug
# text, kept compressed (see `_pack`).
_HOT_FIELDS = ("source_code",)
_ZLIB_MAGIC = b"\x00precompile-zlib\x00"
_BACKEND_TEXT_FIELDS = (
    "aot_joint_graph_str",
    "aot_forward_graph_str",
    "aot_backward_graph_str",
    "min_cut_info_str",
)
_BACKEND_TIME_FIELDS = ("forward_time_taken_ns", "backward_time_taken_ns")
# Fields of the saved AOT config that describe one use, not the backend: the
# sources of the graph's arguments name the user's modules
# (`self.blocks[3].weight`), so equal blocks would otherwise never share.
_BINDING_CONFIG_FIELDS = ("aot_autograd_arg_pos_to_source",)


def read_manifest(store: ReadStore, digest: str) -> tuple[list[str], dict[str, Any]]:
    children, meta = store.get_manifest(digest)
    return list(children), dict(meta)


def put_pickled(store: WriteStore, obj: Any) -> PickledRef:
    """Store `obj` as a deterministic pickle plus its out-of-band parts."""
    record, parts = pickling.dumps(obj)
    return PickledRef(store.put(record), tuple(store.put(p) for p in parts))


def load_pickled(ref: PickledRef, blobs: dict[str, Any]) -> Any:
    """Unpickle a `put_pickled` reference from blobs already read."""
    return pickling.loads(blobs[ref.record], [blobs[d] for d in ref.parts])


def get_many(store: ReadStore, digests: list[str]) -> dict[str, Any]:
    """Read (and verify) `digests` in one batch where the store can."""
    unique = list(dict.fromkeys(digests))
    if isinstance(store, BatchRead):
        blobs = store.get_many(unique)
    else:
        blobs = [store.get(d) for d in unique]
    return dict(zip(unique, blobs))


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


def _put_fields(store: WriteStore, obj: Any, text: Sequence[str], as_json: Sequence[str] = ()) -> dict[str, str]:
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


def _put_autotune(store: WriteStore, kernel_hash: str, cache_dir: str) -> list[AutotuneRef]:
    """Store the autotuning results recorded for a Triton binary that are in
    Inductor's cache dir."""
    out = []
    for path in autotune_capture.paths_for(kernel_hash):
        rel = kernels.autotune_relpath(path, cache_dir)
        if rel is None:
            continue
        try:
            out.append(AutotuneRef(rel, store.put_file(path)))
        except FileNotFoundError:  # removed since it was recorded
            continue
    return out


@dataclasses.dataclass(frozen=True)
class StoredGraph:
    """A `CompiledFxGraph` in store form: its manifest, and the blobs read for it.

    `blobs` maps digests to verified blobs; it is shared by everything read
    for one entry and filled by one batched read (see `entries.fetch_entry`).
    """

    digest: str
    meta: GraphMeta
    blobs: dict[str, Any]

    @staticmethod
    def put(store: WriteStore, graph: CompiledFxGraph) -> str:
        """Store `graph`; returns its manifest digest."""
        fields = _put_fields(store, graph, _GRAPH_TEXT_FIELDS, GRAPH_JSON_FIELDS)
        triton: list[TritonKernelRef] = []
        autotune: list[AutotuneRef] = []
        static_ref = None
        cache_dir = inductor_cache_dir()
        bundle = triton_bundle(graph)
        if bundle is not None:
            # Winners of tuning at first launch ran after torch collected the bundle.
            bundle = with_coordesc_winners(picklable_triton_bundle(bundle))
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
                    files.append(TritonFile(artifact.filename, digest, load_digest))
                triton.append(TritonKernelRef(kernel.kernel_hash, int(kernel.device), tuple(files)))
                for tuned in _put_autotune(store, kernel.kernel_hash, cache_dir):
                    if tuned not in autotune:
                        autotune.append(tuned)
            if bundle.static_autotuners:
                static_ref = put_pickled(store, portable_static_autotuners(list(bundle.static_autotuners), cache_dir))
        libraries = []
        for path, key, cache_class in kernel_capture.libraries_for(graph.cache_key):
            rel = kernels.library_relpath(path, cache_dir)
            if rel is not None:
                libraries.append(LibraryRef(rel, store.put_file(path), key, cache_class))

        skeleton = copy.copy(graph)
        for name in (*fields, TRITON_BUNDLE_FIELD):
            setattr(skeleton, name, None)
        _zero(skeleton, GRAPH_TIME_FIELDS)
        meta = GraphMeta(
            skeleton=put_pickled(store, skeleton),
            fields=fields,
            triton=tuple(triton),
            static_autotuners=static_ref,
            libraries=tuple(libraries),
            autotune=tuple(autotune),
        )
        return store.put_manifest(sorted(set(meta.children())), meta.to_json())

    @classmethod
    def read(cls, store: ReadStore, digest: str, blobs: dict[str, Any]) -> StoredGraph:
        """Read and check the manifest; the blobs come later, in one batch."""
        _, doc = read_manifest(store, digest)
        meta = GraphMeta.from_json(doc)
        for lib in meta.libraries:
            kernels.validate_library_path(lib.relpath)
        for tuned in meta.autotune:
            kernels.validate_autotune_path(tuned.relpath)
        return cls(digest=digest, meta=meta, blobs=blobs)

    def needed(self) -> list[str]:
        """What loading reads: everything but the Triton IR."""
        meta = self.meta
        out = meta.skeleton.children() + list(meta.fields.values())
        for kernel in meta.triton:
            out += [f.load for f in kernel.files if f.load is not None]
        if meta.static_autotuners is not None:
            out += meta.static_autotuners.children()
        return out + [lib.digest for lib in meta.libraries] + [t.digest for t in meta.autotune]

    def place_libraries(self, cache_dir: str) -> None:
        """Put the C++ kernel libraries where Inductor's loader finds them, and
        the Triton kernels' autotuning results where Inductor reads them."""
        for lib in self.meta.libraries:
            kernels.place_library(cache_dir, lib.relpath, self.blobs[lib.digest])
            register_library(lib.cache_class, lib.key, os.path.join(cache_dir, lib.relpath))
        for tuned in self.meta.autotune:
            kernels.place_autotune(cache_dir, tuned.relpath, self.blobs[tuned.digest])

    def materialize(self) -> CompiledFxGraph:
        """A fresh `CompiledFxGraph`, as torch had it before saving."""
        meta, blobs = self.meta, self.blobs
        graph: CompiledFxGraph = load_pickled(meta.skeleton, blobs)
        _restore_fields(graph, {n: blobs[d] for n, d in meta.fields.items()}, GRAPH_JSON_FIELDS)
        if meta.triton or meta.static_autotuners is not None:
            set_triton_bundle(
                graph,
                (
                    (
                        kernel.kernel_hash,
                        kernel.device,
                        [(f.name, bytes(blobs[f.load])) for f in kernel.files if f.load is not None],
                    )
                    for kernel in meta.triton
                ),
                []
                if meta.static_autotuners is None
                else local_static_autotuners(load_pickled(meta.static_autotuners, blobs), inductor_cache_dir()),
            )
        return graph


def put_binding(store: WriteStore, result: BundledAOTAutogradResult[Any]) -> Binding:
    """The per-use part of a result (see `schema.Binding`).

    Kept in the entry rather than the backend manifest, it leaves equal
    backends with equal digests.
    """
    config = result.sanitized_aot_config
    per_use = {n: getattr(config, n) for n in _BINDING_CONFIG_FIELDS if hasattr(config, n)}
    return Binding(
        aot_id=getattr(config, "aot_id", None),
        config=put_pickled(store, per_use) if per_use else None,
        fields=_put_fields(store, result, _BACKEND_TEXT_FIELDS),
    )


@dataclasses.dataclass(frozen=True)
class StoredBackend:
    """A `BundledAOTAutogradResult` in store form, as used once (its binding)."""

    digest: str
    meta: BackendMeta
    forward: StoredGraph
    backward: StoredGraph | None
    binding: Binding
    blobs: dict[str, Any]

    @staticmethod
    def put(store: WriteStore, result: BundledAOTAutogradResult[Any]) -> str:
        """Store the shareable part of `result`; returns its manifest digest."""
        fw = StoredGraph.put(store, result.compiled_fw.result)
        bw = None
        if result.compiled_bw is not None:
            bw = StoredGraph.put(store, result.compiled_bw.result)
        bw_module = None
        if result.serialized_bw_module is not None:
            record, parts = graph_codec.serialized_to_bytes(result.serialized_bw_module)
            bw_module = PickledRef(store.put(record), tuple(store.put(p) for p in parts))

        skeleton = copy.copy(result)
        skeleton.compiled_fw = copy.copy(result.compiled_fw)
        skeleton.compiled_fw.result = None
        if result.compiled_bw is not None:
            skeleton.compiled_bw = copy.copy(result.compiled_bw)
            skeleton.compiled_bw.result = None
        skeleton.serialized_bw_module = None
        # What travels in the binding, and the backend id (it names this use;
        # torch clears it on save, though not in every release), do not
        # belong to what is shared.
        skeleton.sanitized_aot_config = copy.copy(result.sanitized_aot_config)
        neutral = [("aot_id", 0), ("precompile_backend_id", None)]
        neutral += [(n, None) for n in _BINDING_CONFIG_FIELDS]
        for name, value in neutral:
            if hasattr(skeleton.sanitized_aot_config, name):
                setattr(skeleton.sanitized_aot_config, name, value)
        for name in _BACKEND_TEXT_FIELDS:
            if hasattr(skeleton, name):
                setattr(skeleton, name, None)
        _zero(skeleton, _BACKEND_TIME_FIELDS)
        meta = BackendMeta(skeleton=put_pickled(store, skeleton), forward=fw, backward=bw, bw_module=bw_module)
        return store.put_manifest(sorted(set(meta.children())), meta.to_json())

    @classmethod
    def read(cls, store: ReadStore, digest: str, binding: Binding, blobs: dict[str, Any]) -> StoredBackend:
        """Read and check the manifests; the blobs come later, in one batch."""
        _, doc = read_manifest(store, digest)
        meta = BackendMeta.from_json(doc)
        return cls(
            digest=digest,
            meta=meta,
            forward=StoredGraph.read(store, meta.forward, blobs),
            backward=None if meta.backward is None else StoredGraph.read(store, meta.backward, blobs),
            binding=binding,
            blobs=blobs,
        )

    def needed(self) -> list[str]:
        """What loading reads of the shared part (each use adds its binding)."""
        out = self.meta.skeleton.children()
        if self.meta.bw_module is not None:
            out += self.meta.bw_module.children()
        out += self.forward.needed()
        return out + (self.backward.needed() if self.backward is not None else [])

    def with_binding(self, binding: Binding) -> StoredBackend:
        """The same backend as used elsewhere: shares everything but the binding."""
        return dataclasses.replace(self, binding=binding)

    def place_libraries(self, cache_dir: str) -> None:
        self.forward.place_libraries(cache_dir)
        if self.backward is not None:
            self.backward.place_libraries(cache_dir)

    def materialize(self) -> BundledAOTAutogradResult[Any]:
        """A fresh `BundledAOTAutogradResult`, as torch recorded it."""
        blobs, binding = self.blobs, self.binding
        result: BundledAOTAutogradResult[Any] = load_pickled(self.meta.skeleton, blobs)
        _restore_fields(result, {n: blobs[d] for n, d in binding.fields.items()})
        config = result.sanitized_aot_config
        if binding.aot_id is not None and hasattr(config, "aot_id"):
            config.aot_id = binding.aot_id
        if binding.config is not None:
            for name, value in load_pickled(binding.config, blobs).items():
                setattr(config, name, value)
        result.compiled_fw.result = self.forward.materialize()
        if self.backward is not None:
            # Saved with a backward, so the skeleton holds its place.
            assert result.compiled_bw is not None
            result.compiled_bw.result = self.backward.materialize()
        bw_module = self.meta.bw_module
        if bw_module is not None:
            result.serialized_bw_module = graph_codec.serialized_from_bytes(
                blobs[bw_module.record], [blobs[p] for p in bw_module.parts]
            )
        return result
