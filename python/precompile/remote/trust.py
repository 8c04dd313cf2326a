"""Who may make a host run code: signed remote refs, trusted keys, and the explicit opt-in.

Anyone who can write to the Redis server can plant an entry whose blobs hash
correctly; digests say what the bytes are, not who made them. So a ref on the
remote carries a signature (docs/FORMAT.md, signed refs): ed25519, by the
pushing host's key from `precompile.keygen`, over the full ref name and the
manifest digest it points at. A reader accepts a remote ref only when that
signature verifies under a key it trusts (`trusted_keys=` or
`$PRECOMPILE_TRUSTED_KEYS`); the manifest and every blob it reaches are then
checked against their digests as they arrive, which is what extends the
signature to the bytes.

With no trusted key configured, nothing from the remote (and no bundle) is
trusted, unless the user opts in with `allow_unsigned=True` or
`$PRECOMPILE_ALLOW_UNSIGNED=1`: then signatures are not checked at all. A
configured key always wins over the opt-in.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from .._core import SigningKey, TrustedKeys, UntrustedError
from .manifest import is_digest

__all__ = [
    "ALLOW_UNSIGNED_ENV",
    "SIGNING_KEY_ENV",
    "RefValue",
    "TrustPolicy",
    "parse_ref_value",
    "resolve_signing_key",
]

ALLOW_UNSIGNED_ENV = "PRECOMPILE_ALLOW_UNSIGNED"
SIGNING_KEY_ENV = "PRECOMPILE_SIGNING_KEY"
_SCHEME = "ed25519:"
_SIG_HEX = 128

KeySpecs = Sequence[str | os.PathLike[str]]


@dataclasses.dataclass(frozen=True)
class RefValue:
    """What a remote ref holds: the manifest digest, and who signed it (None: nobody)."""

    digest: str
    signer: str | None = None
    signature: str | None = None

    def encode(self) -> str:
        if self.signer is None or self.signature is None:
            return self.digest
        return f"{self.digest} {self.signer} {self.signature}"

    @classmethod
    def signed(cls, key: SigningKey, name: str, digest: str) -> RefValue:
        return cls(digest, key.public, key.sign_ref(name, digest))


def parse_ref_value(value: bytes | str) -> RefValue | None:
    """The ref value a remote holds, or None when it is not one (a miss, never an error).

    A bare digest parses as unsigned; a signed value is
    `<digest> ed25519:<64 hex> <128 hex>`. Whether the signature is any good
    is `TrustPolicy`'s question.
    """
    text = value.decode("ascii", errors="replace") if isinstance(value, bytes) else value
    parts = text.split(" ")
    if not parts or not is_digest(parts[0]):
        return None
    if len(parts) == 1:
        return RefValue(parts[0])
    if len(parts) != 3 or not parts[1].startswith(_SCHEME) or len(parts[2]) != _SIG_HEX:
        return None
    return RefValue(parts[0], parts[1], parts[2])


def _env_allow_unsigned() -> bool:
    return os.environ.get(ALLOW_UNSIGNED_ENV, "").strip() == "1"


class TrustPolicy:
    """Which signed refs and bundles a reader accepts.

    `keys` None means no key is configured: then everything is refused
    unless `allow_unsigned`, which accepts everything unchecked.
    """

    def __init__(self, keys: TrustedKeys | None, allow_unsigned: bool = False) -> None:
        self.keys = keys
        self.allow_unsigned = allow_unsigned and keys is None

    @classmethod
    def resolve(cls, trusted_keys: KeySpecs | None = None, allow_unsigned: bool | None = None) -> TrustPolicy:
        """From the arguments, else `$PRECOMPILE_TRUSTED_KEYS` and `$PRECOMPILE_ALLOW_UNSIGNED`.

        A bad key (or a key file other users may write) raises here, at setup.
        """
        if trusted_keys is not None:
            keys: TrustedKeys | None = TrustedKeys([os.fspath(k) for k in trusted_keys])
        else:
            keys = TrustedKeys.from_env()
        allow = _env_allow_unsigned() if allow_unsigned is None else allow_unsigned
        return cls(keys, allow)

    @property
    def specs(self) -> list[str] | None:
        """The trusted keys in text form, or None when none is configured."""
        return None if self.keys is None else self.keys.keys

    @property
    def closed(self) -> bool:
        """True when nothing at all is accepted: no key configured and no opt-in."""
        return self.keys is None and not self.allow_unsigned

    def how_to_open(self) -> str:
        return (
            "pass trusted_keys=[...] (or set $PRECOMPILE_TRUSTED_KEYS) to accept what a trusted key signed, "
            f"or allow_unsigned=True (${ALLOW_UNSIGNED_ENV}=1) to accept anything unchecked"
        )

    def refusal(self, name: str, value: RefValue) -> str | None:
        """None when ref `name` holding `value` is accepted; otherwise why not."""
        if self.keys is None:
            return None if self.allow_unsigned else "no trusted keys are configured"
        if value.signer is None or value.signature is None:
            return "the remote ref is not signed"
        if self.keys.verify_ref(name, value.digest, value.signer, value.signature) is None:
            return f"the remote ref's signature (by {value.signer[:24]}...) does not verify under a trusted key"
        return None

    def bundle_keys(self, what: str) -> list[str] | None:
        """The keys a bundle layer must be signed by (None: accepted unchecked, by opt-in).

        Raises `UntrustedError` when nothing is trusted.
        """
        if self.closed:
            raise UntrustedError(
                f"{what}: no trusted keys are configured, so no bundle is trusted; {self.how_to_open()}"
            )
        return self.specs


def resolve_signing_key(signing_key: str | os.PathLike[str] | SigningKey | None = None) -> SigningKey | None:
    """The key this host signs its pushes with: the argument, else `$PRECOMPILE_SIGNING_KEY`.

    None when neither names one (then this host does not publish). A key
    file that cannot be read, or that other users may read, raises here.
    """
    if isinstance(signing_key, SigningKey):
        return signing_key
    if signing_key is None:
        signing_key = os.environ.get(SIGNING_KEY_ENV) or None
    if signing_key is None:
        return None
    return SigningKey(os.fspath(signing_key))
