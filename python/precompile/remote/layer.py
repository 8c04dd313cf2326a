"""The remote as the last layer of a store: read-through, write-behind, faults as misses.

`RemoteLayer` answers the read API of `Store` and `Bundle` (get_ref,
contains, get, get_many, get_manifest, refs) from a `Remote`, copying what
it reads into the local writable store: a ref found on the remote brings its
whole closure over (verified, one round trip per manifest level) and is then
set locally, so the next process on this host finds the entry on disk.
`push` uploads entries after they were saved locally.

No fault of the remote reaches the caller. The first one that looks like an
outage (refused, reset, timed out, an error reply) warns once with a
`PrecompileWarning` and takes the remote out of use for `retry_after`
seconds, during which reads miss at once and saves stay local; torch
compiles what it could not load. A value that does not hash to its name is
counted and treated as a miss, without taking the remote out of use. Any
other exception on the way (a bug, a reply nothing anticipated) is handled
as an outage: it never reaches torch, nor a save that already succeeded
locally.

Trust (see `trust`): a remote ref is used only when its signature verifies
under a key the reader trusts; any other ref is a miss, counted as
`untrusted` and explained (`refusal`), and nothing it names is fetched. A
host without a signing key reads but does not publish: `push` warns once
and leaves its saves local.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .._core import CorruptObjectError, MissingObjectError, SigningKey, Store
from ..warning import PrecompileWarning
from .client import Remote
from .connection import RemoteError
from .sync import SyncReport, pull_closure, push
from .trust import SIGNING_KEY_ENV, TrustPolicy, resolve_signing_key

__all__ = ["RemoteLayer"]

log = logging.getLogger(__name__)
T = TypeVar("T")


class RemoteLayer:
    """A read-only layer over `remote` that fills `local` as it reads."""

    def __init__(
        self,
        remote: Remote,
        local: Store,
        *,
        retry_after: float = 60.0,
        trust: TrustPolicy | None = None,
        signing_key: SigningKey | None = None,
    ) -> None:
        self.remote = remote
        self.local = local
        self.retry_after = retry_after
        # Defaults: $PRECOMPILE_TRUSTED_KEYS / $PRECOMPILE_ALLOW_UNSIGNED and
        # $PRECOMPILE_SIGNING_KEY.
        self.trust = TrustPolicy.resolve() if trust is None else trust
        self.signing_key = resolve_signing_key() if signing_key is None else signing_key
        self._down_until = 0.0
        self._warned = False
        self._warned_unsigned = False
        # Why each recently refused ref was refused, for `refusal`.
        self._refused: dict[str, str] = {}

    @property
    def path(self) -> str:
        return self.remote.url

    @property
    def available(self) -> bool:
        """False while the remote is out of use after a fault."""
        return time.monotonic() >= self._down_until

    def stats(self) -> dict[str, int]:
        return self.remote.stats()

    def _guard(self, what: str, fn: Callable[[], T], default: T) -> T:
        if not self.available:
            return default
        try:
            return fn()
        except (CorruptObjectError, MissingObjectError, ValueError) as e:
            # Damaged or incomplete content: a miss, the server itself is fine.
            log.info("remote %s: %s", what, e)
            return default
        except RemoteError as e:
            self._out_of_use(what, e)
            return default
        except Exception as e:  # nothing from the remote may reach torch or a finished save
            log.warning("remote %s: unexpected %s", what, self.remote.redact(repr(e)))
            self._out_of_use(what, RemoteError(self.remote.redact(f"{type(e).__name__}: {e}")))
            return default

    def _out_of_use(self, what: str, error: BaseException) -> None:
        self._down_until = time.monotonic() + self.retry_after
        log.debug("remote %s failed: %r", what, error)
        if self._warned:
            return
        self._warned = True

        warnings.warn(
            PrecompileWarning(
                f"precompile remote {self.remote.url} failed during {what} ({error}); going on with the "
                f"local store only (retrying after {self.retry_after:.0f} s); what cannot be loaded compiles"
            ),
            stacklevel=4,
        )

    # -- reads ---------------------------------------------------------------
    def get_ref(self, name: str) -> str | None:
        def fetch() -> str | None:
            if self.trust.closed:
                # Nothing on the remote is trusted; install warned once already.
                return None
            value = self.remote.get_ref_value(name)
            if value is None:
                return None
            why = self.trust.refusal(name, value)
            if why is not None:
                self._refuse(name, why)
                return None
            digest = value.digest
            pull_closure(self.local, self.remote, digest)
            # Only now, with everything it reaches on disk, does the local
            # store learn the ref.
            self.local.set_ref(name, digest)
            return digest

        digest = self._guard(f"a read of {name!r}", fetch, None)
        self.remote.counters["hits" if digest is not None else "misses"] += 1
        return digest

    def _refuse(self, name: str, why: str) -> None:
        self.remote.counters["untrusted"] += 1
        if len(self._refused) >= 256:
            self._refused.pop(next(iter(self._refused)))
        self._refused[name] = why

    def refusal(self, name: str) -> str | None:
        """Why the last read of ref `name` refused what the remote held, if it did."""
        return self._refused.pop(name, None)

    def _fetch(self, digests: Sequence[str]) -> bool:
        missing = [d for d in dict.fromkeys(digests) if not self.local.contains(d)]
        if not missing:
            return True

        def fetch() -> bool:
            for data in self.remote.get_blobs(missing).values():
                self.local.put(data)
            return True

        return self._guard("an object read", fetch, False)

    def contains(self, digest: str) -> bool:
        return self._fetch([digest])

    def get(self, digest: str) -> Any:
        if not self._fetch([digest]):
            raise MissingObjectError(f"object {digest} is not on the remote")
        return self.local.get(digest)

    def get_many(self, digests: list[str]) -> list[Any]:
        if not self._fetch(digests):
            raise MissingObjectError("objects are missing from the remote")
        return list(self.local.get_many(digests))

    def get_manifest(self, digest: str) -> tuple[list[str], dict[str, Any]]:
        if not self._fetch([digest]):
            raise MissingObjectError(f"manifest {digest} is not on the remote")
        children, meta = self.local.get_manifest(digest)
        return list(children), dict(meta)

    def refs(self, prefix: str = "") -> list[str]:
        return self._guard("a ref listing", lambda: self.remote.refs(prefix), [])

    # -- writes --------------------------------------------------------------
    def push(self, names: Sequence[str]) -> SyncReport | None:
        """Upload refs `names` from the local store; None when the remote is out of use."""
        if not names:
            return SyncReport()
        key = self.signing_key
        if key is None:
            if not self._warned_unsigned:
                self._warned_unsigned = True
                warnings.warn(
                    PrecompileWarning(
                        f"precompile: no signing key, so saves stay local and are not pushed to {self.remote.url}; "
                        f"pass install(signing_key=...) or set ${SIGNING_KEY_ENV} to publish"
                    ),
                    stacklevel=4,
                )
            return None
        return self._guard("a push", lambda: push(self.local, self.remote, names, signing_key=key), None)
