"""Precompile cache entries in store form.

An entry is a manifest over the pickled Dynamo entry (bytecode, guards), one
manifest per backend (see `results`), and the CPU instruction-set probe
libraries. A ref `dynamo/<key>` names it, where `<key>` is the key torch's
DynamoCache files the compiled function under.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from . import kernels, module_aliases, pickling
from ._torch_compat import (
    TORCH_VERSION,
    BundledAOTAutogradCacheArtifact,
    CompiledFxGraph,
    PrecompileCacheEntry,
    inductor_cache_dir,
    isa_probe_libraries,
)
from .artifacts import StoredBackendArtifact
from .results import (
    PICKLED_KIND,
    StoredBackend,
    binding_children,
    get_many,
    load_pickled,
    pickled_children,
    put_binding,
    put_pickled,
    read_manifest,
)

__all__ = ["ENTRY_KIND", "REF_PREFIX", "SaveMemo", "fetch_entry", "put_entry", "ref_name"]

ENTRY_KIND = "precompile/entry"
ENTRY_FORMAT = 1
REF_PREFIX = "dynamo/"

@dataclasses.dataclass
class SaveMemo:
    """What one save has already written, so no entry writes it again.

    `backends`: backend manifests by artifact identity (the same artifact
    reached from several entries is serialized once). `isa`: the stored
    instruction-set probes, the same for every CPU entry of the save.
    """

    backends: dict[int, str] = dataclasses.field(default_factory=dict)
    isa: list[list[str]] | None = None


def ref_name(key: str) -> str:
    return REF_PREFIX + key


def _bundled_fx(artifact: Any) -> bool:
    if type(artifact) is not BundledAOTAutogradCacheArtifact:
        return False
    content = artifact.content
    fw = getattr(content, "compiled_fw", None)
    bw = getattr(content, "compiled_bw", None)
    return isinstance(getattr(fw, "result", None), CompiledFxGraph) and (
        bw is None or isinstance(getattr(bw, "result", None), CompiledFxGraph)
    )


def put_backend(store: Any, artifact: Any, memo: dict[int, str]) -> dict[str, Any]:
    """Store one backend artifact; returns its entry record.

    The record names the backend manifest (shared by every use of an equal
    backend) and this use's binding (see `results.put_binding`).
    """
    if isinstance(artifact, StoredBackendArtifact):
        digest = artifact.stored_digest
        if digest is not None and store.contains(digest):
            memo[id(artifact)] = digest
            return {"manifest": digest, "binding": artifact.stored.binding_meta()}
    if isinstance(artifact, StoredBackendArtifact) or _bundled_fx(artifact):
        content = artifact.content
        if id(artifact) not in memo:
            memo[id(artifact)] = StoredBackend.put(store, content)
        return {"manifest": memo[id(artifact)], "binding": put_binding(store, content)}
    if id(artifact) not in memo:
        # Other backends (eager, regional inductor, future types) keep
        # torch's own pickling, still deduplicated by content.
        ref = put_pickled(store, artifact)
        memo[id(artifact)] = store.put_manifest(
            sorted({ref["record"], *ref["parts"]}), {"kind": PICKLED_KIND, "artifact": ref}
        )
    return {"manifest": memo[id(artifact)], "binding": None}


def _put_isa_probes(store: Any) -> list[list[str]]:
    cache_dir = inductor_cache_dir()
    isa = []
    for path in isa_probe_libraries(cache_dir):
        rel = kernels.library_relpath(path, cache_dir)
        if rel is not None:
            isa.append([rel, store.put_file(path)])
    return isa


def put_entry(
    store: Any, entry: PrecompileCacheEntry, key: str, memo: SaveMemo | None = None
) -> str:
    """Store `entry` under `key`; returns the entry manifest digest."""
    memo = SaveMemo() if memo is None else memo
    entry = module_aliases.carry(entry)
    dynamo = put_pickled(store, entry.dynamo)
    backends = {bid: put_backend(store, art, memo.backends) for bid, art in sorted(entry.backends.items())}
    isa: list[list[str]] = []
    if entry.dynamo.device_type == "cpu":
        if memo.isa is None:
            memo.isa = _put_isa_probes(store)
        isa = memo.isa
    meta = {
        "kind": ENTRY_KIND,
        "format": ENTRY_FORMAT,
        "key": key,
        "torch": TORCH_VERSION,
        "fn_name": entry.dynamo.fn_name,
        "device_type": entry.dynamo.device_type,
        "dynamo": dynamo,
        "backends": backends,
        "isa": isa,
    }
    children = {dynamo["record"], *dynamo["parts"], *(d for _, d in isa)}
    for record in backends.values():
        children.add(record["manifest"])
        if record["binding"] is not None:
            children.update(binding_children(record["binding"]))
    digest = store.put_manifest(sorted(children), meta)
    store.set_ref(ref_name(key), digest)
    return digest


def fetch_entry(store: Any, digest: str) -> PrecompileCacheEntry:
    """Read, verify and unpack an entry; places its kernel libraries.

    The manifests are read first; then every blob the load path needs is
    read (and so verified) in one batch, before any of them is unpickled: a
    corrupt or missing object raises here, never later inside torch.
    """
    _, meta = read_manifest(store, digest)
    if meta.get("kind") != ENTRY_KIND:
        raise ValueError(f"{digest} is not a precompile entry")
    if meta.get("format") != ENTRY_FORMAT:
        raise ValueError(f"entry format {meta.get('format')!r} is not supported")
    if meta.get("torch") != TORCH_VERSION:
        raise ValueError(f"entry was saved by torch {meta.get('torch')}, this is {TORCH_VERSION}")
    isa = [(kernels.validate_library_path(rel), d) for rel, d in meta["isa"]]
    blobs: dict[str, Any] = {}
    needed = pickled_children(meta["dynamo"]) + [d for _, d in isa]
    # Backend manifests by digest: a backend several codes use is read once.
    stored: dict[str, Any] = {}
    for record in meta["backends"].values():
        manifest, binding = record["manifest"], record["binding"]
        if manifest not in stored:
            _, backend = read_manifest(store, manifest)
            if backend.get("kind") == PICKLED_KIND:
                stored[manifest] = backend["artifact"]
                needed += pickled_children(backend["artifact"])
            else:
                stored[manifest] = StoredBackend.read(store, manifest, binding, blobs)
                needed += stored[manifest].needed()
        if binding is not None:
            needed += binding_children(binding)
    blobs.update(get_many(store, needed))

    backends = {}
    for bid, record in meta["backends"].items():
        held = stored[record["manifest"]]
        if isinstance(held, StoredBackend):
            backends[bid] = StoredBackendArtifact(bid, held.with_binding(record["binding"]))
        else:
            backends[bid] = load_pickled(held, blobs)
    dynamo = load_pickled(meta["dynamo"], blobs)
    cache_dir = inductor_cache_dir()
    for rel, d in isa:
        kernels.place_library(cache_dir, rel, blobs[d])
        kernels.mark_probe_loaded(cache_dir, rel)
    for held in stored.values():
        if isinstance(held, StoredBackend):
            held.place_libraries(cache_dir)
    return PrecompileCacheEntry(dynamo=dynamo, backends=backends)
