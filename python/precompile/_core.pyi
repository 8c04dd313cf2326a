"""precompile's store core, implemented in Rust."""

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, final

from typing_extensions import Buffer

__all__ = [
    "Blob",
    "Bundle",
    "BundleStats",
    "BundleVerifyReport",
    "CorruptObjectError",
    "EvictReport",
    "ExportReport",
    "FormatError",
    "GcReport",
    "ImportReport",
    "InvalidDigestError",
    "InvalidNameError",
    "LockTimeout",
    "MissingObjectError",
    "RefConflictError",
    "RefNotFoundError",
    "RefUsage",
    "SigningKey",
    "Stats",
    "Store",
    "StoreError",
    "StoreFileExistsError",
    "StoreFileNotFoundError",
    "StoreIOError",
    "StoreIsADirectoryError",
    "StoreNotADirectoryError",
    "StorePermissionError",
    "TrustedKeys",
    "UntrustedError",
    "Usage",
    "VerifyReport",
    "__version__",
    "blake3_hex",
    "keygen",
    "open_bundle",
    "public_key",
]

__version__: str

class StoreError(Exception):
    """Base class of every error the store raises."""

class CorruptObjectError(StoreError):
    """An object's content does not hash to its name (a flipped byte, a truncation)."""

class MissingObjectError(StoreError):
    """An object is not in the store."""

class LockTimeout(StoreError):
    """The store's GC lock could not be taken before the lock timeout."""

class FormatError(StoreError):
    """A store or manifest is in a format this build does not understand."""

class RefConflictError(StoreError):
    """Refs of a bundle that could not be set in this store; every other ref was set.
    `conflicts` lists (name, reason) pairs."""

    conflicts: list[tuple[str, str]]

class StoreIOError(StoreError, OSError):
    """An operating-system error in the store (disk full, read-only file system, permission
    denied...); an OSError with errno and filename set."""

class StoreFileNotFoundError(StoreIOError, FileNotFoundError):
    """A file or directory the store needs does not exist."""

class StorePermissionError(StoreIOError, PermissionError):
    """The store was refused access to a file (EACCES, EPERM)."""

class StoreFileExistsError(StoreIOError, FileExistsError):
    """A file the store wanted to create already exists."""

class StoreIsADirectoryError(StoreIOError, IsADirectoryError):
    """A directory where the store expected a file."""

class StoreNotADirectoryError(StoreIOError, NotADirectoryError):
    """A file where the store expected a directory."""

class InvalidNameError(StoreError, ValueError):
    """A ref name the store refuses (empty, absolute, '..', control characters...)."""

class InvalidDigestError(StoreError, ValueError):
    """A digest that is not 64 lower-case hex characters."""

class RefNotFoundError(StoreError, LookupError):
    """A ref that does not exist where one is required."""

class UntrustedError(StoreError):
    """A bundle that is unsigned where a trusted signature is required, signed by a key
    that is not trusted, or changed after signing; or a store owned or writable by another
    user. Nothing of it was read."""

@final
class GcReport:
    """What `Store.gc` swept (or, with `dry_run`, would sweep)."""

    @property
    def objects_freed(self) -> int: ...
    @property
    def bytes_freed(self) -> int: ...
    @property
    def objects_kept(self) -> int: ...
    @property
    def tmp_freed(self) -> int: ...
    @property
    def dry_run(self) -> bool: ...
    def to_dict(self) -> dict[str, Any]:
        """The report as a plain dict, one key per attribute (JSON-ready)."""

@final
class VerifyReport:
    """What `Store.verify` found: digests of corrupt objects, of objects refs reach that are
    missing, and of manifests in a version this build cannot read."""

    @property
    def objects(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def corrupt(self) -> list[str]: ...
    @property
    def missing(self) -> list[str]: ...
    @property
    def unknown(self) -> list[str]: ...
    @property
    def holders(self) -> dict[str, list[str]]:
        """For each damaged digest refs reach, the names of those refs."""
    @property
    def ok(self) -> bool: ...
    def to_dict(self) -> dict[str, Any]:
        """The report as a plain dict, one key per attribute (JSON-ready)."""

@final
class Stats:
    """`Store.stats`: objects, bytes and refs on disk; puts, gets and dedup hits since open."""

    @property
    def objects(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def refs(self) -> int: ...
    @property
    def dedup_hits(self) -> int: ...
    @property
    def puts(self) -> int: ...
    @property
    def gets(self) -> int: ...
    @property
    def misses(self) -> int: ...
    def to_dict(self) -> dict[str, Any]:
        """The report as a plain dict, one key per attribute (JSON-ready)."""

@final
class ExportReport:
    """What `Store.export_bundle` wrote."""

    @property
    def blobs(self) -> int: ...
    @property
    def refs(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    def to_dict(self) -> dict[str, Any]:
        """The report as a plain dict, one key per attribute (JSON-ready)."""

@final
class ImportReport:
    """What `Store.import_bundle` did."""

    @property
    def objects_new(self) -> int: ...
    @property
    def objects_present(self) -> int: ...
    @property
    def bytes_new(self) -> int: ...
    @property
    def refs(self) -> int: ...
    @property
    def refs_changed(self) -> int: ...
    @property
    def objects_repaired(self) -> int: ...
    def to_dict(self) -> dict[str, Any]:
        """The report as a plain dict, one key per attribute (JSON-ready)."""

@final
class EvictReport:
    """What `Store.evict` did: the refs it deleted, the store's size before and after, and
    the sweep that followed."""

    @property
    def refs_evicted(self) -> list[str]: ...
    @property
    def bytes_before(self) -> int: ...
    @property
    def bytes_after(self) -> int: ...
    @property
    def objects_freed(self) -> int: ...
    @property
    def bytes_freed(self) -> int: ...
    @property
    def objects_kept(self) -> int: ...
    @property
    def tmp_freed(self) -> int: ...
    @property
    def dry_run(self) -> bool: ...
    def to_dict(self) -> dict[str, Any]:
        """The report as a plain dict, one key per attribute (JSON-ready)."""

@final
class RefUsage:
    """One ref in `Store.usage`: its closure's size, and what only it holds. `mtime` is the
    ref's last use in seconds since the epoch, or None if unknown."""

    @property
    def name(self) -> str: ...
    @property
    def digest(self) -> str: ...
    @property
    def mtime(self) -> float | None: ...
    @property
    def objects(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def unique_bytes(self) -> int: ...
    @property
    def missing(self) -> int: ...
    def to_dict(self) -> dict[str, Any]:
        """The report as a plain dict, one key per attribute (JSON-ready)."""

@final
class Usage:
    """`Store.usage`: each ref's closure size and the store's totals."""

    @property
    def refs(self) -> list[RefUsage]: ...
    @property
    def objects(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def reachable_bytes(self) -> int: ...
    @property
    def logical_bytes(self) -> int: ...
    def to_dict(self) -> dict[str, Any]:
        """The report as a plain dict, one key per attribute (JSON-ready)."""

@final
class BundleVerifyReport:
    """What `Bundle.verify` found: the digests of blobs that do not hash to their name."""

    @property
    def blobs(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def corrupt(self) -> list[str]: ...
    @property
    def ok(self) -> bool: ...
    def to_dict(self) -> dict[str, Any]:
        """The report as a plain dict, one key per attribute (JSON-ready)."""

@final
class BundleStats:
    """`Bundle.stats`: blobs, bytes (of the file) and refs; gets and misses since open."""

    @property
    def blobs(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def refs(self) -> int: ...
    @property
    def gets(self) -> int: ...
    @property
    def misses(self) -> int: ...
    def to_dict(self) -> dict[str, Any]:
        """The report as a plain dict, one key per attribute (JSON-ready)."""

# Called as progress(done, total) with bytes processed, about ten times a second.
_Progress = Callable[[int, int], object]

def blake3_hex(data: Buffer) -> str:
    """Hashes any buffer with blake3 and returns the lower-case hex digest."""

@final
class Blob(Buffer):
    """The bytes of one stored object, memory-mapped read-only."""

    @property
    def digest(self) -> str:
        """The object's blake3 digest, lower-case hex."""

    def __len__(self) -> int: ...
    def __bytes__(self) -> bytes: ...
    # Read-only buffer protocol. Python gives its methods names only from
    # 3.12 (PEP 688); the Buffer base says so on 3.11 too.
    if sys.version_info >= (3, 12):
        def __buffer__(self, flags: int, /) -> memoryview: ...
        def __release_buffer__(self, buffer: memoryview, /) -> None: ...

@final
class Store:
    """A content-addressed store of blobs, named by their blake3 digest."""

    def __new__(
        cls,
        path: str | Path,
        *,
        verify: bool = True,
        create: bool = True,
        lock_timeout: float = 30.0,
        shared: bool = False,
    ) -> Store: ...
    @property
    def path(self) -> Path:
        """The store root, absolute."""

    def put(self, data: Buffer) -> str:
        """Stores any C-contiguous buffer and returns its digest."""

    def put_with_status(self, data: Buffer) -> tuple[str, bool]:
        """Like `put`, also saying whether the content was new."""

    def put_file(self, path: str | Path) -> str:
        """Stores a file's content, streaming it, and returns its digest."""

    def get(self, digest: str) -> Blob:
        """Maps the object named `digest` (verified unless opened with verify=False)."""

    def get_many(self, digests: list[str]) -> list[Blob]:
        """Maps several objects at once (in parallel when there are many), each
        verified unless opened with verify=False; in the order given."""

    def contains(self, digest: str) -> bool:
        """Whether the object named `digest` is stored."""

    def is_manifest(self, digest: str) -> bool:
        """Whether the object named `digest` starts like a manifest (not verified).

        Never blocks: anything but a regular file at its path raises
        CorruptObjectError, an absent one MissingObjectError."""

    def size(self, digest: str) -> int:
        """The size in bytes of the object named `digest` (not verified); raises like `is_manifest`."""

    def object_path(self, digest: str) -> str:
        """Where the object named `digest` lives (whether or not it exists)."""

    def set_ref(self, name: str, digest: str) -> None:
        """Points ref `name` at the stored object `digest`, atomically."""

    def get_ref(self, name: str) -> str | None:
        """The digest ref `name` points at, or None."""

    def delete_ref(self, name: str) -> bool:
        """Removes ref `name`; False when it did not exist."""

    def refs(self, prefix: str = "") -> list[str]:
        """Ref names starting with `prefix`, sorted."""

    def touch_ref(self, name: str) -> bool:
        """Sets ref `name`'s mtime to now; False when it does not exist."""

    def ref_mtime(self, name: str) -> float | None:
        """Ref `name`'s mtime in seconds since the epoch, or None."""

    def put_manifest(self, children: list[str], meta: dict[str, Any] | None = None) -> str:
        """Stores a manifest listing `children` with JSON metadata `meta`."""

    def get_manifest(self, digest: str) -> tuple[list[str], dict[str, Any]]:
        """Reads the manifest `digest`: (children, meta)."""

    def gc(self, dry_run: bool = False, grace_seconds: float = 3600.0) -> GcReport:
        """Sweeps objects no ref reaches that are older than `grace_seconds`."""

    def verify(self, *, progress: _Progress | None = None) -> VerifyReport:
        """Rehashes every object and checks that everything refs reach exists."""

    def stats(self) -> Stats:
        """Objects, bytes and refs on disk; puts, gets and dedup hits since open."""

    def export_bundle(
        self,
        refs: Sequence[str] | None,
        path: str | Path,
        *,
        progress: _Progress | None = None,
        sign_with: str | Path | None = None,
    ) -> ExportReport:
        """Writes refs `refs` (None: all) and everything they reach to one bundle file,
        signed with the secret key file `sign_with` when given."""

    def import_bundle(
        self,
        path: str | Path,
        *,
        progress: _Progress | None = None,
        trusted_keys: Sequence[str | Path] | None = None,
        allow_unsigned: bool | None = None,
    ) -> ImportReport:
        """Unpacks the bundle at `path` (idempotent, deduplicating); with trusted keys
        (default: $PRECOMPILE_TRUSTED_KEYS), only a bundle one of them signed. With no
        trusted key configured, raises UntrustedError unless `allow_unsigned` (default:
        $PRECOMPILE_ALLOW_UNSIGNED=1)."""

    def evict(self, max_size: int, *, dry_run: bool = False, grace_seconds: float = 3600.0) -> EvictReport:
        """Deletes least recently used refs until the store fits in `max_size` bytes, then sweeps."""

    def usage(self) -> Usage:
        """Each ref's closure size and the store's totals."""

@final
class Bundle:
    """A bundle file mapped read-only; blobs are served without copying."""

    @property
    def path(self) -> Path:
        """The path the bundle was opened from."""

    @property
    def signer(self) -> str | None:
        """The public key whose valid signature the bundle carries, or None."""

    def check_trusted(self, trusted_keys: Sequence[str | Path] | None = None) -> None:
        """Raises UntrustedError unless one of `trusted_keys` (default:
        $PRECOMPILE_TRUSTED_KEYS) signed the bundle; once it passed, every blob is
        hashed before it is served, whatever `verify` the bundle was opened with."""

    def contains(self, digest: str) -> bool:
        """Whether the bundle holds the blob `digest`."""

    def get(self, digest: str) -> Blob:
        """The blob `digest`, straight from the mapping (checked first, with verify)."""

    def size(self, digest: str) -> int:
        """The size of the blob `digest` in bytes, without reading it."""

    def get_manifest(self, digest: str) -> tuple[list[str], dict[str, Any]]:
        """Reads the manifest `digest`: (children, meta)."""

    def closure(self, digest: str) -> list[str]:
        """Every blob `digest` reaches through manifests, itself first."""

    def get_ref(self, name: str) -> str | None:
        """The digest ref `name` points at, or None."""

    def refs(self, prefix: str = "") -> list[str]:
        """Ref names starting with `prefix`, sorted."""

    def digests(self) -> list[str]:
        """Every blob digest, sorted."""

    def __len__(self) -> int: ...
    def verify(self, parallel: bool = True, *, progress: _Progress | None = None) -> BundleVerifyReport:
        """Hashes every blob (in parallel by default, without the GIL)."""

    def verify_blobs(self, digests: Sequence[str]) -> list[str]:
        """Hashes the given blobs in parallel and returns those that do not match."""

    def prefetch(self, digests: Sequence[str]) -> None:
        """Asks the kernel to read the given blobs ahead (madvise WILLNEED)."""

    def stats(self) -> BundleStats:
        """Blobs, bytes (of the file) and refs; gets and misses since open."""

def open_bundle(path: str | Path, *, verify: bool = True, trusted_keys: Sequence[str | Path] | None = None) -> Bundle:
    """Maps the bundle at `path` read-only after validating its metadata; with trusted
    keys (default: $PRECOMPILE_TRUSTED_KEYS), refuses one none of them signed."""

@final
class SigningKey:
    """A secret key file (`keygen`) loaded to sign remote refs; refused when other
    users may read it (ValueError)."""

    def __new__(cls, path: str | Path) -> SigningKey: ...
    @property
    def public(self) -> str:
        """The public half, `ed25519:<64 hex>`."""

    def sign_ref(self, name: str, digest: str) -> str:
        """The signature (128 hex digits) of ref `name` pointing at `digest`."""

@final
class TrustedKeys:
    """Public keys a reader trusts, parsed once (keys `ed25519:<hex>` or files of them;
    a file other users may write raises UntrustedError)."""

    def __new__(cls, keys: Sequence[str | Path]) -> TrustedKeys: ...
    @staticmethod
    def from_env() -> TrustedKeys | None:
        """The keys of $PRECOMPILE_TRUSTED_KEYS, or None when it names none."""

    @property
    def keys(self) -> list[str]:
        """The keys, `ed25519:<hex>`."""

    def __len__(self) -> int: ...
    def verify_ref(self, name: str, digest: str, signer: str, signature: str) -> str | None:
        """`signer` when `signature` is its valid signature of ref `name` pointing at
        `digest` and it is trusted; None otherwise (never raises)."""

def keygen(path: str | Path) -> str:
    """Writes a new secret key to `path` (mode 0600, never over an existing file) and
    returns its public key, `ed25519:<64 hex>`."""

def public_key(path: str | Path) -> str:
    """The public key, `ed25519:<64 hex>`, of the secret key file at `path`."""
