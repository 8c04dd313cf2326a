"""Signed bundles through the public API: keys, signing on export, and refusal of
unsigned, foreign and changed bundles before anything of them is read."""

from __future__ import annotations

import os
import pickle
import struct
from pathlib import Path

import pytest
from blake3 import blake3
from support.synthetic import load_entry, make_entries

import precompile
from precompile import CorruptObjectError, Store, StoreError, UntrustedError, keygen, open_bundle
from precompile.layers import open_layered

TRAILER = 40


def offsets(data: bytes) -> dict[str, int]:
    """Section offsets from a bundle header (see docs/FORMAT.md, bundle signatures)."""
    index_offset, _, refs_offset, refs_len, sig_offset, sig_len = struct.unpack_from("<6Q", data, 56)
    return {
        "index": index_offset,
        "refs": refs_offset,
        "refs_end": refs_offset + refs_len,
        "sig": sig_offset,
        "sig_len": sig_len,
    }


def forge(data: bytearray) -> bytearray:
    """Recompute the trailer hash, as someone changing the bundle on purpose would."""
    at = offsets(bytes(data))
    digest = blake3(bytes(data[:128]) + bytes(data[at["index"] : at["refs_end"]])).digest()
    data[len(data) - TRAILER : len(data) - 8] = digest
    return data


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, str]:
    return {name: keygen(tmp_path / f"{name}.key") for name in ("alice", "mallory")}


@pytest.fixture
def signed(tmp_path: Path, keys: dict[str, str]) -> tuple[Store, dict[str, str], Path]:
    store = Store(tmp_path / "src")
    refs = make_entries(store, 2)
    path = tmp_path / "signed.bundle"
    report = store.export_bundle(None, path, sign_with=tmp_path / "alice.key")
    assert report.refs == 2
    return store, refs, path


def test_keygen_writes_a_private_key_and_returns_its_public_key(tmp_path: Path) -> None:
    public = keygen(tmp_path / "k.key")
    assert public.startswith("ed25519:") and len(public) == 8 + 64
    assert (tmp_path / "k.key").stat().st_mode & 0o777 == 0o600
    before = (tmp_path / "k.key").read_bytes()
    with pytest.raises(FileExistsError):
        keygen(tmp_path / "k.key")
    assert (tmp_path / "k.key").read_bytes() == before
    assert keygen(tmp_path / "other.key") != public


def test_signed_round_trip(signed: tuple[Store, dict[str, str], Path], keys: dict[str, str], tmp_path: Path) -> None:
    store, refs, path = signed
    bundle = open_bundle(path, trusted_keys=[keys["alice"]])
    assert bundle.signer == keys["alice"]
    for ref in refs:
        assert load_entry(bundle, ref) == load_entry(store, ref)
    # A key file works as well as the key's text; several keys may be trusted.
    key_file = tmp_path / "trusted.pub"
    key_file.write_text(f"# release signers\n{keys['mallory']}\n{keys['alice']}\n")
    assert open_bundle(path, trusted_keys=[key_file]).signer == keys["alice"]
    bundle.check_trusted([keys["alice"]])
    with pytest.raises(UntrustedError):
        bundle.check_trusted([keys["mallory"]])
    # Without trusted keys a signed bundle opens like any other.
    assert open_bundle(path).signer == keys["alice"]

    dst = Store(tmp_path / "dst")
    assert dst.import_bundle(path, trusted_keys=[keys["alice"]]).refs == 2


def test_unsigned_and_foreign_bundles_are_refused(
    signed: tuple[Store, dict[str, str], Path], keys: dict[str, str], tmp_path: Path
) -> None:
    store, _, path = signed
    unsigned = tmp_path / "unsigned.bundle"
    store.export_bundle(None, unsigned)
    assert open_bundle(unsigned).signer is None  # fine while no trust is asked for
    with pytest.raises(UntrustedError, match="not signed"):
        open_bundle(unsigned, trusted_keys=[keys["alice"]])
    with pytest.raises(UntrustedError, match="not a trusted key"):
        open_bundle(path, trusted_keys=[keys["mallory"]])
    with pytest.raises(UntrustedError):
        open_bundle(path, trusted_keys=[])  # trusting no key refuses everything
    assert issubclass(UntrustedError, StoreError) and type(UntrustedError()).__module__ == "precompile._core"

    dst = Store(tmp_path / "dst")
    for bundle in (unsigned, path):
        with pytest.raises(UntrustedError):
            dst.import_bundle(bundle, trusted_keys=[keys["mallory"]])
    assert dst.refs() == [] and dst.stats().objects == 0  # nothing was written

    with pytest.raises(ValueError, match="64 hex digits"):
        open_bundle(path, trusted_keys=["ed25519:1234"])
    with pytest.raises(ValueError, match="key file"):
        open_bundle(path, trusted_keys=[tmp_path / "absent.pub"])


def test_trusted_keys_from_the_environment(
    signed: tuple[Store, dict[str, str], Path], keys: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _, path = signed
    unsigned = tmp_path / "unsigned.bundle"
    store.export_bundle(None, unsigned)
    monkeypatch.setenv("PRECOMPILE_TRUSTED_KEYS", f"{keys['mallory']}, {keys['alice']}")
    assert open_bundle(path).signer == keys["alice"]
    with pytest.raises(UntrustedError):
        open_bundle(unsigned)
    with pytest.raises(UntrustedError):
        open_layered(str(tmp_path / "local"), [unsigned])
    with pytest.raises(UntrustedError):
        Store(tmp_path / "dst").import_bundle(unsigned)
    monkeypatch.setenv("PRECOMPILE_TRUSTED_KEYS", keys["mallory"])
    with pytest.raises(UntrustedError):
        open_bundle(path)
    # An explicit list wins over the environment.
    assert open_bundle(path, trusted_keys=[keys["alice"]]).signer == keys["alice"]
    # A bundle opened earlier is checked when it is handed over as a layer.
    monkeypatch.delenv("PRECOMPILE_TRUSTED_KEYS")
    opened = open_bundle(unsigned)
    with pytest.raises(UntrustedError):
        open_layered(str(tmp_path / "local"), [opened], trusted_keys=[keys["alice"]])
    assert not (tmp_path / "local").exists()
    layered = open_layered(str(tmp_path / "local"), [open_bundle(path)], trusted_keys=[keys["alice"]])
    assert layered.refs() == open_bundle(path).refs()


@pytest.mark.parametrize("section", ["header", "index", "refs", "signature"])
def test_a_change_after_signing_is_refused_at_open(
    signed: tuple[Store, dict[str, str], Path], keys: dict[str, str], tmp_path: Path, section: str
) -> None:
    _, _, path = signed
    good = path.read_bytes()
    at = offsets(good)
    where = {
        "header": 20,  # min_align: 64 -> 65 still parses, so only the signature catches it
        "index": at["index"] + 256 * 8 + 5,  # inside the first digest
        "refs": at["refs_end"] - 40,  # a byte of the last ref's name
        "signature": at["sig"] + 60,
    }[section]
    for forged in (False, True):
        data = bytearray(good)
        data[where] ^= 0x01
        if forged:
            forge(data)
        victim = tmp_path / f"{section}-{forged}.bundle"
        victim.write_bytes(bytes(data))
        with pytest.raises(StoreError) as info:
            open_bundle(victim, trusted_keys=[keys["alice"]])
        if forged and section != "header":
            assert info.type is UntrustedError, info.value
        # A present signature is checked even when no trust is asked for.
        with pytest.raises(StoreError):
            open_bundle(victim)


def test_a_changed_blob_is_refused_when_read(
    signed: tuple[Store, dict[str, str], Path], keys: dict[str, str], tmp_path: Path
) -> None:
    """Blob bytes are bound by their digests in the signed index: the bundle opens, and
    the blob fails its digest when read (always verified under trusted keys)."""
    _, _, path = signed
    plain = open_bundle(path)
    victim_digest = max(plain.digests(), key=plain.size)
    data = bytearray(path.read_bytes())
    start = data.find(bytes(plain.get(victim_digest))[:4096])
    del plain
    data[start + 100] ^= 0xFF
    victim = tmp_path / "blob.bundle"
    victim.write_bytes(bytes(data))
    bundle = open_bundle(victim, verify=False, trusted_keys=[keys["alice"]])
    with pytest.raises(CorruptObjectError):
        bundle.get(victim_digest)
    assert bundle.verify().corrupt == [victim_digest]


def test_an_open_bundle_keeps_its_bytes_when_the_path_is_replaced(tmp_path: Path, keys: dict[str, str]) -> None:
    """Export writes a new file and renames it over the old path; a handle on the old
    file keeps reading (and verifying) its own bytes."""
    store = Store(tmp_path / "src")
    first = make_entries(store, 2, seed=1)
    path = tmp_path / "model.bundle"
    store.export_bundle(None, path, sign_with=tmp_path / "alice.key")
    old = open_bundle(path, trusted_keys=[keys["alice"]])
    before = {ref: load_entry(old, ref) for ref in first}
    inode = path.stat().st_ino

    for ref in first:
        store.delete_ref(ref)
    second = make_entries(store, 3, seed=2)
    store.export_bundle(None, path, sign_with=tmp_path / "alice.key")
    assert path.stat().st_ino != inode  # a new file, not the old one rewritten
    assert {ref: load_entry(old, ref) for ref in first} == before
    assert old.verify().ok
    new = open_bundle(path, trusted_keys=[keys["alice"]])
    assert new.refs() == sorted(second)
    assert [p for p in os.listdir(tmp_path) if p.endswith(".tmp")] == []


class _Payload:
    """Unpickling this runs code: it creates the directory `marker`."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.mkdir, (self.marker,))


@pytest.mark.torch
def test_refusal_comes_before_any_unpickling(tmp_path: Path, keys: dict[str, str]) -> None:
    """A bundle whose every blob verifies, and whose entry runs code when loaded."""
    from precompile import _torch as tc
    from precompile.entries import fetch_entry
    from precompile.schema import EntryMeta, PickledRef, SourceLocation

    marker = tmp_path / "payload-ran"
    store = Store(tmp_path / "evil")
    record = store.put(pickle.dumps(_Payload(str(marker))))
    meta = EntryMeta(
        key="k",
        torch=tc.TORCH_VERSION,
        triton=None,
        device_type="cpu",
        source=SourceLocation("f", None, None),
        dynamo=PickledRef(record),
        backends={},
    ).to_json()
    entry = store.put_manifest([record], meta)
    store.set_ref("dynamo/k", entry)
    bundles = {
        "unsigned": store.export_bundle(None, tmp_path / "unsigned.bundle") and tmp_path / "unsigned.bundle",
        "foreign": store.export_bundle(None, tmp_path / "foreign.bundle", sign_with=tmp_path / "mallory.key")
        and tmp_path / "foreign.bundle",
    }
    good = tmp_path / "alice.bundle"
    store.export_bundle(None, good, sign_with=tmp_path / "alice.key")
    data = bytearray(good.read_bytes())
    data[offsets(bytes(data))["refs_end"] - 40] ^= 0x01  # rename the ref
    bundles["tampered"] = tmp_path / "tampered.bundle"
    bundles["tampered"].write_bytes(bytes(forge(data)))

    # The payload is real: loading the entry from an unchecked bundle runs it
    # (unpickling runs it; the type check after it only refuses the result).
    with pytest.raises(TypeError, match="not a Dynamo cache entry"):
        fetch_entry(open_layered(str(tmp_path / "control"), [bundles["unsigned"]], allow_unsigned=True), entry)
    assert marker.is_dir()
    marker.rmdir()

    for name, bundle in bundles.items():
        with pytest.raises(UntrustedError):
            open_bundle(bundle, trusted_keys=[keys["alice"]])
        try:
            with pytest.raises(UntrustedError):
                precompile.install(
                    tmp_path / f"serve-{name}", layers=[bundle], trusted_keys=[keys["alice"]], save_on_exit=False
                )
        finally:
            precompile.uninstall()
        assert not marker.exists(), name
        assert not (tmp_path / f"serve-{name}").exists()  # nothing placed either
