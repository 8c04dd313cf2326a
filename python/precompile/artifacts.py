"""Backend artifacts that torch's PrecompileContext can hold, backed by the store.

`StoredBackendArtifact` is what our DynamoCache hands torch for each backend
of a loaded entry. It is a `BundledAOTAutogradCacheArtifact`, so torch treats
it like its own, but its content is rebuilt from verified blobs only when
torch asks for it (its kernel libraries were placed when the entry was
read), and saving it again reuses the stored manifest instead of
serializing the result a second time.
"""

from __future__ import annotations

import copy
from typing import Any

from ._torch import BundledAOTAutogradCacheArtifact, in_process_kernel_loads
from .results import StoredBackend

__all__ = ["StoredBackendArtifact"]


class StoredBackendArtifact(BundledAOTAutogradCacheArtifact):
    """A bundled AOTAutograd backend whose content lives in the store."""

    def __init__(self, key: str, stored: StoredBackend) -> None:
        self.key = key
        self.stored = stored
        # Set when torch replaces the content (edit_contents); the stored
        # manifest then no longer describes it.
        self._edited: Any = None

    @property
    def content(self) -> Any:
        if self._edited is not None:
            return self._edited
        return self.stored.materialize()

    @content.setter
    def content(self, value: Any) -> None:
        self._edited = value

    def after_deserialization(self) -> Any:
        # The kernels were placed in the caches when the entry was read:
        # loading them needs no compile worker pool (see the adapter).
        with in_process_kernel_loads():
            return super().after_deserialization()

    @property
    def stored_digest(self) -> str | None:
        """The backend manifest this artifact still matches, if any."""
        return None if self._edited is not None else self.stored.digest

    def __deepcopy__(self, memo: dict[int, Any]) -> StoredBackendArtifact:
        # PrecompileContext deep-copies every recorded artifact. The stored
        # form is immutable, so a copy shares it and rebuilds lazily.
        clone = StoredBackendArtifact(self.key, self.stored)
        if self._edited is not None:
            clone._edited = copy.deepcopy(self._edited, memo)
        return clone

    def __reduce__(self) -> Any:
        # Pickled (e.g. into torch's Mega-Cache), it becomes torch's own
        # artifact type, so a process without precompile can read it.
        return (BundledAOTAutogradCacheArtifact, (self.key, self.content))

    def __repr__(self) -> str:
        return f"StoredBackendArtifact(key={self.key!r}, digest={self.stored.digest[:16]}…)"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StoredBackendArtifact):
            return self.key == other.key and self.stored_digest == other.stored_digest
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]
