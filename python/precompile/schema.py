"""The typed, versioned metadata that store manifests carry.

Every manifest precompile writes holds one of these records as its metadata
(see docs/FORMAT.md): an entry (one compiled function), a backend (one
AOTAutograd result, shared by every equal use), a graph (one compiled FX
graph), or a pickled artifact (any other backend type). Each is a frozen
dataclass with `to_json`/`from_json`. `from_json` checks the kind and the
format version and refuses what it does not know: a reader never guesses.

Needs no torch, so tools that only read a store (the command line) use it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from ._core import FormatError
from .environment import Environment
from .key_parts import KeyParts

__all__ = [
    "BackendMeta",
    "BackendUse",
    "Binding",
    "EntryMeta",
    "FnIndexMeta",
    "GraphMeta",
    "LibraryRef",
    "PickledArtifactMeta",
    "PickledRef",
    "SCHEMA_FORMAT",
    "SourceLocation",
    "TritonKernelRef",
    "parse_meta",
]

# One version for all record kinds: they change together, and an entry is
# only ever read by a build that understands every record it reaches.
SCHEMA_FORMAT = 4
# Formats still read: 3 lacks only the entry's `key_parts` (and the
# `precompile/fn-index` kind), which readers treat as unknown.
READ_FORMATS = frozenset({3, SCHEMA_FORMAT})

_T = TypeVar("_T", bound="_Record")


def _need(doc: Mapping[str, Any], name: str, types: type | tuple[type, ...]) -> Any:
    value = doc.get(name)
    if not isinstance(value, types):
        raise FormatError(f"manifest field {name!r} is missing or not {types}")
    return value


def _opt(doc: Mapping[str, Any], name: str, types: type | tuple[type, ...]) -> Any:
    value = doc.get(name)
    if value is not None and not isinstance(value, types):
        raise FormatError(f"manifest field {name!r} is not {types}")
    return value


def _digests(value: Any, name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(d, str) for d in value):
        raise FormatError(f"manifest field {name!r} is not a list of digests")
    return tuple(value)


@dataclasses.dataclass(frozen=True)
class PickledRef:
    """A deterministic pickle (`record`) plus its out-of-band buffers (`parts`)."""

    record: str
    parts: tuple[str, ...] = ()

    def children(self) -> list[str]:
        return [self.record, *self.parts]

    def to_json(self) -> dict[str, Any]:
        return {"record": self.record, "parts": list(self.parts)}

    @classmethod
    def from_json(cls, doc: Any) -> PickledRef:
        if not isinstance(doc, Mapping):
            raise FormatError("a pickled reference is not an object")
        return cls(_need(doc, "record", str), _digests(doc.get("parts", []), "parts"))

    @classmethod
    def maybe(cls, doc: Any) -> PickledRef | None:
        return None if doc is None else cls.from_json(doc)


class _Record:
    KIND: ClassVar[str]

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def _check(cls, doc: Any) -> Mapping[str, Any]:
        if not isinstance(doc, Mapping):
            raise FormatError("manifest metadata is not an object")
        if doc.get("kind") != cls.KIND:
            raise FormatError(f"expected a {cls.KIND} manifest, found {doc.get('kind')!r}")
        if doc.get("format") not in READ_FORMATS:
            raise FormatError(
                f"{cls.KIND} format {doc.get('format')!r} is not supported "
                f"(this build reads formats {', '.join(map(str, sorted(READ_FORMATS)))})"
            )
        return doc

    @classmethod
    def from_json(cls: type[_T], doc: Any) -> _T:
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class LibraryRef:
    """A compiled C++ kernel library, placed at `relpath` in Inductor's cache dir."""

    relpath: str
    digest: str
    key: str
    cache_class: str

    def to_json(self) -> list[str]:
        return [self.relpath, self.digest, self.key, self.cache_class]

    @classmethod
    def from_json(cls, doc: Any) -> LibraryRef:
        if not isinstance(doc, list) or len(doc) != 4 or not all(isinstance(x, str) for x in doc):
            raise FormatError("a library reference is not [relpath, digest, key, class]")
        return cls(*doc)


@dataclasses.dataclass(frozen=True)
class AutotuneRef:
    """A Triton kernel's autotuning result, placed at `relpath` in Inductor's cache dir."""

    relpath: str
    digest: str

    def to_json(self) -> list[str]:
        return [self.relpath, self.digest]

    @classmethod
    def from_json(cls, doc: Any) -> AutotuneRef:
        if not isinstance(doc, list) or len(doc) != 2 or not all(isinstance(x, str) for x in doc):
            raise FormatError("an autotune reference is not [relpath, digest]")
        return cls(*doc)


@dataclasses.dataclass(frozen=True)
class TritonFile:
    """One file of a Triton kernel: `load` is the digest read at launch, if any."""

    name: str
    digest: str
    load: str | None

    def to_json(self) -> list[Any]:
        return [self.name, self.digest, self.load]

    @classmethod
    def from_json(cls, doc: Any) -> TritonFile:
        if not isinstance(doc, list) or len(doc) != 3:
            raise FormatError("a Triton file is not [name, digest, load digest]")
        name, digest, load = doc
        if not isinstance(name, str) or not isinstance(digest, str):
            raise FormatError("a Triton file name or digest is not a string")
        if load is not None and not isinstance(load, str):
            raise FormatError("a Triton load digest is not a string")
        return cls(name, digest, load)


@dataclasses.dataclass(frozen=True)
class TritonKernelRef:
    kernel_hash: str
    device: int
    files: tuple[TritonFile, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "hash": self.kernel_hash,
            "device": self.device,
            "files": [f.to_json() for f in self.files],
        }

    @classmethod
    def from_json(cls, doc: Any) -> TritonKernelRef:
        if not isinstance(doc, Mapping):
            raise FormatError("a Triton kernel is not an object")
        files = _need(doc, "files", list)
        return cls(
            _need(doc, "hash", str),
            int(_need(doc, "device", int)),
            tuple(TritonFile.from_json(f) for f in files),
        )


@dataclasses.dataclass(frozen=True)
class GraphMeta(_Record):
    """A compiled FX graph: its skeleton pickle and the blobs taken out of it."""

    KIND: ClassVar[str] = "precompile/fx-graph"
    skeleton: PickledRef
    fields: Mapping[str, str]
    triton: tuple[TritonKernelRef, ...] = ()
    static_autotuners: PickledRef | None = None
    libraries: tuple[LibraryRef, ...] = ()
    autotune: tuple[AutotuneRef, ...] = ()

    def children(self) -> list[str]:
        out = self.skeleton.children() + list(self.fields.values())
        for kernel in self.triton:
            for f in kernel.files:
                out.append(f.digest)
                if f.load is not None:
                    out.append(f.load)
        if self.static_autotuners is not None:
            out += self.static_autotuners.children()
        return out + [lib.digest for lib in self.libraries] + [t.digest for t in self.autotune]

    def to_json(self) -> dict[str, Any]:
        doc = {
            "kind": self.KIND,
            "format": SCHEMA_FORMAT,
            "skeleton": self.skeleton.to_json(),
            "fields": dict(self.fields),
            "triton": [k.to_json() for k in self.triton],
            "static_autotuners": None if self.static_autotuners is None else self.static_autotuners.to_json(),
            "libraries": [lib.to_json() for lib in self.libraries],
        }
        # Written only when there is one, so a graph without autotuning keeps
        # the manifest (and digest) it had before the field existed.
        if self.autotune:
            doc["autotune"] = [t.to_json() for t in self.autotune]
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> GraphMeta:
        doc = cls._check(doc)
        fields = _need(doc, "fields", Mapping)
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in fields.items()):
            raise FormatError("graph fields are not name -> digest")
        return cls(
            skeleton=PickledRef.from_json(doc.get("skeleton")),
            fields=dict(fields),
            triton=tuple(TritonKernelRef.from_json(k) for k in _need(doc, "triton", list)),
            static_autotuners=PickledRef.maybe(doc.get("static_autotuners")),
            libraries=tuple(LibraryRef.from_json(x) for x in _need(doc, "libraries", list)),
            autotune=tuple(AutotuneRef.from_json(x) for x in _autotune_list(doc)),
        )


def _autotune_list(doc: Mapping[str, Any]) -> list[Any]:
    found = doc.get("autotune", [])
    if not isinstance(found, list):
        raise FormatError("graph autotune is not a list")
    return found


@dataclasses.dataclass(frozen=True)
class BackendMeta(_Record):
    """The shareable part of an AOTAutograd result: equal backends, one digest."""

    KIND: ClassVar[str] = "precompile/aot-backend"
    skeleton: PickledRef
    forward: str
    backward: str | None = None
    bw_module: PickledRef | None = None

    def children(self) -> list[str]:
        out = self.skeleton.children() + [self.forward]
        if self.backward is not None:
            out.append(self.backward)
        return out + ([] if self.bw_module is None else self.bw_module.children())

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.KIND,
            "format": SCHEMA_FORMAT,
            "skeleton": self.skeleton.to_json(),
            "forward": self.forward,
            "backward": self.backward,
            "bw_module": None if self.bw_module is None else self.bw_module.to_json(),
        }

    @classmethod
    def from_json(cls, doc: Any) -> BackendMeta:
        doc = cls._check(doc)
        return cls(
            skeleton=PickledRef.from_json(doc.get("skeleton")),
            forward=_need(doc, "forward", str),
            backward=_opt(doc, "backward", str),
            bw_module=PickledRef.maybe(doc.get("bw_module")),
        )


@dataclasses.dataclass(frozen=True)
class PickledArtifactMeta(_Record):
    """A backend of a type precompile does not split (eager, future types)."""

    KIND: ClassVar[str] = "precompile/pickled"
    artifact: PickledRef

    def children(self) -> list[str]:
        return self.artifact.children()

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.KIND, "format": SCHEMA_FORMAT, "artifact": self.artifact.to_json()}

    @classmethod
    def from_json(cls, doc: Any) -> PickledArtifactMeta:
        doc = cls._check(doc)
        return cls(PickledRef.from_json(doc.get("artifact")))


@dataclasses.dataclass(frozen=True)
class Binding:
    """What one use of a shared backend adds: the per-use parts of its result.

    Two graphs that compile to the same backend differ only here: the AOT id
    counts compilations in the process, the argument sources name the user's
    modules (`self.blocks[3].weight`), and the listings name source lines.
    """

    aot_id: int | None
    config: PickledRef | None
    fields: Mapping[str, str]

    def children(self) -> list[str]:
        return ([] if self.config is None else self.config.children()) + list(self.fields.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "aot_id": self.aot_id,
            "config": None if self.config is None else self.config.to_json(),
            "fields": dict(self.fields),
        }

    @classmethod
    def from_json(cls, doc: Any) -> Binding:
        if not isinstance(doc, Mapping):
            raise FormatError("a backend binding is not an object")
        fields = _need(doc, "fields", Mapping)
        return cls(
            aot_id=_opt(doc, "aot_id", int),
            config=PickledRef.maybe(doc.get("config")),
            fields=dict(fields),
        )


@dataclasses.dataclass(frozen=True)
class BackendUse:
    """One backend id of an entry: the backend manifest it uses, and how."""

    manifest: str
    binding: Binding | None

    def to_json(self) -> dict[str, Any]:
        return {
            "manifest": self.manifest,
            "binding": None if self.binding is None else self.binding.to_json(),
        }

    @classmethod
    def from_json(cls, doc: Any) -> BackendUse:
        if not isinstance(doc, Mapping):
            raise FormatError("a backend record is not an object")
        binding = doc.get("binding")
        return cls(_need(doc, "manifest", str), None if binding is None else Binding.from_json(binding))


@dataclasses.dataclass(frozen=True)
class SourceLocation:
    """Where the compiled function is defined, for people reading a store."""

    qualname: str | None
    file: str | None
    line: int | None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.file else "?"
        return f"{self.qualname or '?'} ({where})"


@dataclasses.dataclass(frozen=True)
class EntryMeta(_Record):
    """One compiled function: its Dynamo entry, its backends and what it ran on."""

    KIND: ClassVar[str] = "precompile/entry"
    key: str
    torch: str
    triton: str | None
    device_type: str
    source: SourceLocation
    dynamo: PickledRef
    backends: Mapping[str, BackendUse]
    isa: tuple[tuple[str, str], ...] = ()
    # The relpaths in `isa` that loaded in torch's child process on the
    # writing host (they carried a `.load_ok` marker). None: written before
    # the field existed, when every listed probe had loaded exactly where
    # torch itself marks probes.
    isa_loaded: tuple[str, ...] | None = None
    # Triton's C stub libraries: (Triton cache dir name, file name, digest).
    triton_stubs: tuple[tuple[str, str, str], ...] = ()
    # What can load it (see `environment`); its id names the ref. Every entry
    # precompile writes has one; None only where a record is built without.
    env: Environment | None = None
    # What its key was made from (see `key_parts`); None: format 3.
    key_parts: KeyParts | None = None

    def children(self) -> list[str]:
        out = self.dynamo.children() + [d for _, d in self.isa] + [d for _, _, d in self.triton_stubs]
        for use in self.backends.values():
            out.append(use.manifest)
            if use.binding is not None:
                out += use.binding.children()
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.KIND,
            "format": SCHEMA_FORMAT,
            "key": self.key,
            "torch": self.torch,
            "triton": self.triton,
            "device_type": self.device_type,
            "fn_name": self.source.qualname,
            "source_file": self.source.file,
            "source_line": self.source.line,
            "dynamo": self.dynamo.to_json(),
            "backends": {bid: use.to_json() for bid, use in sorted(self.backends.items())},
            "isa": [list(pair) for pair in self.isa],
            **({} if self.isa_loaded is None else {"isa_loaded": list(self.isa_loaded)}),
            "triton_stubs": [list(stub) for stub in self.triton_stubs],
            **({} if self.env is None else {"env": self.env.to_json()}),
            **({} if self.key_parts is None else {"key_parts": self.key_parts.to_json()}),
        }

    @classmethod
    def from_json(cls, doc: Any) -> EntryMeta:
        doc = cls._check(doc)
        backends = _need(doc, "backends", Mapping)
        isa = _need(doc, "isa", list)
        if not all(isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in isa):
            raise FormatError("entry isa is not a list of [relpath, digest]")
        # Absent in entries written before stubs were shipped: none.
        stubs = doc.get("triton_stubs", [])
        if not isinstance(stubs, list) or not all(
            isinstance(s, list) and len(s) == 3 and all(isinstance(x, str) for x in s) for s in stubs
        ):
            raise FormatError("entry triton_stubs is not a list of [key, filename, digest]")
        return cls(
            key=_need(doc, "key", str),
            torch=_need(doc, "torch", str),
            triton=_opt(doc, "triton", str),
            device_type=_need(doc, "device_type", str),
            source=SourceLocation(
                _opt(doc, "fn_name", str), _opt(doc, "source_file", str), _opt(doc, "source_line", int)
            ),
            dynamo=PickledRef.from_json(doc.get("dynamo")),
            backends={str(b): BackendUse.from_json(u) for b, u in backends.items()},
            isa=tuple((p[0], p[1]) for p in isa),
            isa_loaded=_isa_loaded(doc, {p[0] for p in isa}),
            triton_stubs=tuple((s[0], s[1], s[2]) for s in stubs),
            env=None if doc.get("env") is None else Environment.from_json(doc["env"]),
            key_parts=None if doc.get("key_parts") is None else KeyParts.from_json(doc["key_parts"]),
        )


@dataclasses.dataclass(frozen=True)
class FnIndexMeta(_Record):
    """The index of one function (ref `host/fn/<fn-id>`, see `key_parts`):
    the ref of its last saved entry, that entry's key parts, environment and
    device type. Names no object, so it keeps nothing alive."""

    KIND: ClassVar[str] = "precompile/fn-index"
    ref: str
    key_parts: KeyParts
    env: Environment
    device_type: str

    def children(self) -> list[str]:
        return []

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.KIND,
            "format": SCHEMA_FORMAT,
            "ref": self.ref,
            "key_parts": self.key_parts.to_json(),
            "env": self.env.to_json(),
            "device_type": self.device_type,
        }

    @classmethod
    def from_json(cls, doc: Any) -> FnIndexMeta:
        doc = cls._check(doc)
        return cls(
            ref=_need(doc, "ref", str),
            key_parts=KeyParts.from_json(doc.get("key_parts")),
            env=Environment.from_json(doc.get("env")),
            device_type=_need(doc, "device_type", str),
        )


def _isa_loaded(doc: Mapping[str, Any], listed: set[str]) -> tuple[str, ...] | None:
    loaded = doc.get("isa_loaded")
    if loaded is None:
        return None
    if not isinstance(loaded, list) or not all(isinstance(r, str) and r in listed for r in loaded):
        raise FormatError("entry isa_loaded is not a list of relpaths listed in isa")
    return tuple(loaded)


_KINDS: dict[str, type[_Record]] = {
    c.KIND: c for c in (EntryMeta, BackendMeta, GraphMeta, PickledArtifactMeta, FnIndexMeta)
}


def parse_meta(doc: Any) -> _Record | None:
    """The record a manifest's metadata holds, or None for a manifest that is
    not precompile's (refs may name any manifest). Raises FormatError for a
    precompile record that does not validate."""
    if not isinstance(doc, Mapping):
        return None
    cls = _KINDS.get(doc.get("kind"))  # type: ignore[arg-type]
    return None if cls is None else cls.from_json(doc)
