"""Precompile cache entries in store form.

An entry is a manifest over the pickled Dynamo entry (bytecode, guards), one
manifest per backend (see `results`), and the CPU instruction-set probe
libraries. A ref `dynamo/<env-id>/<key>` names it, where `<key>` is the key
torch's DynamoCache files the compiled function under and `<env-id>` that of
the environment that can load it (see `environment`): hosts of other torch
builds, Pythons or devices sharing a store or a remote keep their entries side
by side. A ref `dynamo/<key>` (written before environments named refs) is
never loaded: it may hold another torch's entry.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Iterator
from typing import Any

from . import host_keys, kernels, module_aliases, triton_stubs
from ._torch import (
    TORCH_GIT,
    TORCH_MARKS_PROBES,
    TORCH_VERSION,
    TRITON_VERSION,
    BundledAOTAutogradCacheArtifact,
    CompiledFxGraph,
    PrecompileCacheEntry,
    accelerator_capability,
    check_loaded_entry,
    cpu_capability,
    entry_source_location,
    inductor_cache_dir,
    initialized_accelerators,
    innermost_fn,
    isa_probe_libraries,
    startable_accelerators,
    torch_marks_loaded_probes,
)
from .artifacts import StoredBackendArtifact
from .environment import Environment
from .key_parts import KeyParts, code_digest, index_ref
from .protocols import ReadStore, WriteStore
from .results import (
    StoredBackend,
    get_many,
    load_pickled,
    put_binding,
    put_pickled,
    read_manifest,
)
from .schema import BackendUse, EntryMeta, FnIndexMeta, PickledArtifactMeta, PickledRef, SourceLocation

__all__ = [
    "REF_PREFIX",
    "SaveMemo",
    "entry_ref",
    "environment",
    "fetch_entry",
    "find_entry",
    "key_parts_of",
    "lookup_refs",
    "parse_ref",
    "put_entry",
    "read_entry_meta",
    "ref_name",
]

REF_PREFIX = "dynamo/"


@dataclasses.dataclass
class SaveMemo:
    """What one save has already written, so no entry writes it again.

    `backends`: backend manifests by artifact identity (the same artifact
    reached from several entries is serialized once). `isa`: the stored
    instruction-set probes, the same for every CPU entry of the save.
    `isa_loaded`: the relpaths of those that loaded here.
    `stubs`: the stored Triton stub libraries, the same for every entry.
    `gpu_recorded`: whether this host's GPU key was recorded.
    """

    backends: dict[int, str] = dataclasses.field(default_factory=dict)
    isa: tuple[tuple[str, str], ...] | None = None
    isa_loaded: tuple[str, ...] = ()
    stubs: tuple[tuple[str, str, str], ...] | None = None
    gpu_recorded: bool = False


def ref_name(key: str, env_id: str) -> str:
    return f"{REF_PREFIX}{env_id}/{key}"


def parse_ref(name: str) -> tuple[str | None, str] | None:
    """(env-id, key) of an entry ref; env-id None for an unnamespaced one
    (written before environments named refs); None if `name` is no entry ref."""
    if not name.startswith(REF_PREFIX):
        return None
    parts = name[len(REF_PREFIX) :].split("/")
    if len(parts) == 1:
        return None, parts[0]
    if len(parts) == 2:
        return parts[0], parts[1]
    return None


_env_lock = threading.Lock()
_envs: dict[str, Environment] = {}


def environment(device_type: str) -> Environment:
    """This process's environment for entries of `device_type`, computed once."""
    with _env_lock:
        env = _envs.get(device_type)
        if env is None:
            impl = sys.implementation.name
            env = Environment(
                python=f"{impl} {sys.version_info[0]}.{sys.version_info[1]}",
                torch=TORCH_VERSION,
                torch_git=TORCH_GIT,
                triton=TRITON_VERSION,
                cpu=cpu_capability(),
                accelerator=accelerator_capability(device_type),
            )
            _envs[device_type] = env
        return env


def entry_ref(key: str, device_type: str) -> str:
    """The ref this process files an entry of `device_type` under."""
    return ref_name(key, environment(device_type).id)


def lookup_refs(key: str, *, start_devices: bool = True) -> Iterator[str]:
    """The refs this process may load `key` from, best first: an entry for an
    accelerator the process has initialized, then a CPU entry, then (with
    `start_devices`) one for an accelerator present but not started yet.

    The last are asked about only when the others missed, and lazily: naming
    their environment starts the device, which a GPU model whose first
    compiled call starts CUDA itself (inputs moved inside the function) needs,
    and a CPU model served by its CPU entry never pays for.
    """
    for device in [*initialized_accelerators(), "cpu"]:
        yield entry_ref(key, device)
    if start_devices:
        for device in startable_accelerators():
            yield entry_ref(key, device)


def find_entry(store: ReadStore, key: str) -> tuple[str, str] | None:
    """(ref name, entry digest) of the entry this process loads for `key`."""
    for name in lookup_refs(key):
        digest = store.get_ref(name)
        if digest is not None:
            return name, digest
    return None


def find_lineage_entries(store: ReadStore, key: str) -> dict[str, tuple[str, str]]:
    """Every wrapper lineage of `key` (torch's key of a function) this process
    loads, in the best environment that holds any: lineage key (`<key>-<tag>`,
    see `_torch.lineages`) -> (ref name, entry digest), as `find_entry` gives."""
    for name in lookup_refs(key):
        found = {}
        for ref in sorted(store.refs(f"{name}-")):
            digest = store.get_ref(ref)
            if digest is not None:
                found[key + ref[len(name) :]] = (ref, digest)
        if found:
            return found
    return {}


def _bundled_fx(artifact: Any) -> bool:
    if type(artifact) is not BundledAOTAutogradCacheArtifact:
        return False
    content = artifact.content
    fw = getattr(content, "compiled_fw", None)
    bw = getattr(content, "compiled_bw", None)
    return isinstance(getattr(fw, "result", None), CompiledFxGraph) and (
        bw is None or isinstance(getattr(bw, "result", None), CompiledFxGraph)
    )


def put_backend(store: WriteStore, artifact: Any, memo: dict[int, str]) -> BackendUse:
    """Store one backend artifact; returns how the entry uses it.

    The record names the backend manifest (shared by every use of an equal
    backend) and this use's binding (see `results.put_binding`).
    """
    if isinstance(artifact, StoredBackendArtifact):
        digest = artifact.stored_digest
        if digest is not None and store.contains(digest):
            memo[id(artifact)] = digest
            return BackendUse(digest, artifact.stored.binding)
    if isinstance(artifact, StoredBackendArtifact) or _bundled_fx(artifact):
        content = artifact.content
        if id(artifact) not in memo:
            memo[id(artifact)] = StoredBackend.put(store, content)
        return BackendUse(memo[id(artifact)], put_binding(store, content))
    if id(artifact) not in memo:
        # Other backends (eager, regional inductor, future types) keep
        # torch's own pickling, still deduplicated by content.
        meta = PickledArtifactMeta(put_pickled(store, artifact))
        memo[id(artifact)] = store.put_manifest(sorted(set(meta.children())), meta.to_json())
    return BackendUse(memo[id(artifact)], None)


def _put_isa_probes(store: WriteStore) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """Store the ISA probes; returns them and the relpaths of those that loaded."""
    cache_dir = inductor_cache_dir()
    isa, loaded = [], []
    for path, ok in isa_probe_libraries(cache_dir):
        rel = kernels.library_relpath(path, cache_dir)
        if rel is not None:
            isa.append((rel, store.put_file(path)))
            if ok:
                loaded.append(rel)
    return tuple(isa), tuple(loaded)


def put_entry(store: WriteStore, entry: PrecompileCacheEntry, key: str, memo: SaveMemo | None = None) -> str:
    """Store `entry` under `key` (ref `entry_ref(key, device type)`); returns
    the entry manifest digest."""
    memo = SaveMemo() if memo is None else memo
    entry = module_aliases.carry(entry)
    dynamo = put_pickled(store, entry.dynamo)
    backends = {str(bid): put_backend(store, art, memo.backends) for bid, art in sorted(entry.backends.items())}
    # Every entry carries the ISA probes: a GPU function's graph breaks can
    # leave frames whose graphs run C++ kernels on the CPU.
    if memo.isa is None:
        memo.isa, memo.isa_loaded = _put_isa_probes(store)
    # Every entry carries the Triton stubs this process loaded, a CPU one too:
    # on a host with a GPU, torch's FX-graph cache hit asks Triton for its
    # backend hash (`inductor_meta_from_config`), which builds `cuda_utils`
    # with the C compiler before a CPU graph's first call.
    if memo.stubs is None:
        memo.stubs = triton_stubs.put_stubs(store)
    if entry.dynamo.device_type != "cpu" and not memo.gpu_recorded:
        host_keys.record(store, gpu=True)
        memo.gpu_recorded = True
    stubs = memo.stubs
    qualname, source_file, line = entry_source_location(entry.dynamo)
    parts = _key_parts(entry.dynamo, qualname, line)
    meta = EntryMeta(
        key=key,
        torch=TORCH_VERSION,
        triton=TRITON_VERSION,
        device_type=entry.dynamo.device_type,
        source=SourceLocation(qualname, source_file, line),
        dynamo=dynamo,
        backends=backends,
        isa=memo.isa,
        isa_loaded=memo.isa_loaded,
        triton_stubs=stubs,
        env=environment(entry.dynamo.device_type),
        key_parts=parts,
    )
    digest = store.put_manifest(sorted(set(meta.children())), meta.to_json())
    name = entry_ref(key, entry.dynamo.device_type)
    store.set_ref(name, digest)
    index = index_ref(parts)
    if index is not None:
        record = FnIndexMeta(name, parts, environment(entry.dynamo.device_type), entry.dynamo.device_type)
        store.set_ref(index, store.put_manifest([], record.to_json()))
    return digest


def _key_parts(dynamo: Any, qualname: str | None, line: int | None) -> KeyParts:
    """The parts of the key of the function `dynamo` was compiled from: its
    own code is the one that starts at its first line (the others are
    resume functions after graph breaks)."""
    codes = list(getattr(dynamo, "codes", []))
    main = next((c for c in codes if getattr(c.python_code, "co_firstlineno", None) == line), None)
    if main is None and codes:
        main = codes[0]
    code = getattr(main, "python_code", None)
    filename = getattr(code, "co_filename", None)
    return KeyParts(
        module=getattr(main, "python_module", None),
        qualname=qualname,
        file=filename if isinstance(filename, str) else None,
        line=line,
        code=code_digest(code) if code is not None else None,
    )


def key_parts_of(fn: Any) -> KeyParts | None:
    """The key parts of the function `fn` (innermost, as torch keys it), or
    None where it has no code."""
    target = innermost_fn(fn)
    code = getattr(target, "__code__", None)
    if code is None:
        return None
    return KeyParts(
        module=getattr(target, "__module__", None),
        qualname=getattr(target, "__qualname__", None),
        file=code.co_filename,
        line=code.co_firstlineno,
        code=code_digest(code),
    )


def read_entry_meta(store: ReadStore, digest: str) -> EntryMeta:
    """The validated metadata of the entry manifest `digest`."""
    _, doc = read_manifest(store, digest)
    return EntryMeta.from_json(doc)


def fetch_entry(store: ReadStore, digest: str) -> PrecompileCacheEntry:
    """Read, verify and unpack an entry; places its kernel libraries.

    The manifests are read first; then every blob the load path needs is
    read (and so verified) in one batch, before any of them is unpickled: a
    corrupt or missing object raises here, never later inside torch.
    """
    meta = read_entry_meta(store, digest)
    if meta.torch != TORCH_VERSION:
        raise ValueError(f"entry was saved by torch {meta.torch}, this is {TORCH_VERSION}")
    isa = [(kernels.validate_library_path(rel), d) for rel, d in meta.isa]
    stubs = [(*triton_stubs.validate(key, name), d) for key, name, d in meta.triton_stubs]
    blobs: dict[str, Any] = {}
    needed = meta.dynamo.children() + [d for _, d in isa] + [d for _, _, d in stubs]
    # Backend manifests by digest: a backend several codes use is read once.
    stored: dict[str, StoredBackend | PickledRef] = {}
    for use in meta.backends.values():
        if use.manifest not in stored:
            _, doc = read_manifest(store, use.manifest)
            if doc.get("kind") == PickledArtifactMeta.KIND:
                ref = PickledArtifactMeta.from_json(doc).artifact
                stored[use.manifest] = ref
                needed += ref.children()
            else:
                if use.binding is None:
                    raise ValueError(f"backend {use.manifest} is used without a binding")
                backend = StoredBackend.read(store, use.manifest, use.binding, blobs)
                stored[use.manifest] = backend
                needed += backend.needed()
        if use.binding is not None:
            needed += use.binding.children()
    blobs.update(get_many(store, needed))

    backends: dict[Any, Any] = {}
    for bid, use in meta.backends.items():
        held = stored[use.manifest]
        if isinstance(held, StoredBackend):
            assert use.binding is not None
            backends[bid] = StoredBackendArtifact(bid, held.with_binding(use.binding))
        else:
            backends[bid] = load_pickled(held, blobs)
    dynamo = load_pickled(meta.dynamo, blobs)
    # Blobs that verify can still unpickle to something else (a record
    # written by another tool, or crafted): refused here, not inside torch.
    check_loaded_entry(dynamo, backends)
    cache_dir = inductor_cache_dir()
    # A probe is marked only where torch (or the store, while installed)
    # trusts markers, and only if it loaded on the writing host.
    if meta.isa_loaded is not None:
        loaded = set(meta.isa_loaded)
    else:
        loaded = {rel for rel, _ in isa} if TORCH_MARKS_PROBES else set()
    marks = torch_marks_loaded_probes()
    for rel, d in isa:
        kernels.place_library(cache_dir, rel, blobs[d])
        if marks and rel in loaded:
            kernels.mark_probe_loaded(cache_dir, rel)
    for held in stored.values():
        if isinstance(held, StoredBackend):
            held.place_libraries(cache_dir)
    # Before any kernel of the entry loads: Triton builds its stubs then.
    triton_stubs.place([(key, name, blobs[d]) for key, name, d in stubs])
    return PrecompileCacheEntry(dynamo=dynamo, backends=backends)
