"""A signed fleet: only a writer holding a trusted key makes a host run its code.

An attacker here is a plain Redis client with no key: it plants entries whose
every blob hashes correctly (a real pickle that creates a marker directory
when loaded) under the victims' ref names, and replays or forges signatures.
Against a real redis-server, no host runs the payload, through the remote
layer, `pull`, bundle layers and import; the honest fleet still shares.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from support.processes import PACKAGE_ROOT, run_precompile
from support.synthetic import load_entry, make_entries

import precompile
from precompile import CorruptObjectError, PrecompileWarning, Store, UntrustedError, keygen, open_bundle
from precompile.layers import open_layered
from precompile.remote import Remote, RemoteLayer, pull, push
from precompile.remote.sync import local_closure
from precompile.remote.trust import RefValue, TrustPolicy, parse_ref_value


class _Payload:
    """Unpickling this runs code: it creates the directory `marker`."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.mkdir, (self.marker,))


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, str]:
    """Public keys by name; the secret halves are `<name>.key` under tmp_path."""
    return {name: keygen(tmp_path / f"{name}.key") for name in ("alice", "mallory")}


def _plant(remote: Remote, src: Store, name: str, value: RefValue | str) -> None:
    """What a keyless writer can do: upload correctly hashed objects and set a ref."""
    closure = local_closure(src, [src.get_ref(name) or ""])
    remote.put_blobs((d, src.get(d), m) for d, m in closure.items())
    raw = value if isinstance(value, str) else value.encode()
    remote._client.set(remote.keys.ref(name), raw)


def _evil_store(tmp_path: Path, name: str, marker: Path) -> Store:
    """A store whose entry `name` reaches a payload pickle."""
    evil = Store(tmp_path / "evil")
    record = evil.put(pickle.dumps(_Payload(str(marker))))
    evil.set_ref(name, evil.put_manifest([record], {"kind": "entry", "key": name}))
    return evil


def _accepted(layer: RemoteLayer, names: list[str]) -> list[str]:
    return [n for n in names if layer.get_ref(n) is not None]


def test_planted_and_forged_refs_are_refused_by_the_remote_layer_and_pull(
    redis_server: Any, tmp_path: Path, keys: dict[str, str]
) -> None:
    remote = Remote(redis_server.url)
    src = Store(tmp_path / "src")
    refs = make_entries(src, 2)
    push(src, remote, signing_key=tmp_path / "alice.key")
    marker = tmp_path / "payload-ran"
    evil = _evil_store(tmp_path, "dynamo/planted", marker)
    evil_digest = evil.get_ref("dynamo/planted") or ""
    genuine = remote.get_ref_value("dynamo/e0")
    assert genuine is not None and genuine.signer == keys["alice"]
    mallory = precompile.SigningKey(tmp_path / "mallory.key")
    plants = {
        # unsigned, as a plain client writes it
        "dynamo/planted": evil_digest,
        # signed by a key nobody trusts
        "dynamo/mallory": RefValue.signed(mallory, "dynamo/mallory", evil_digest),
        # alice's signature of e0 replayed for another name
        "dynamo/replayed-name": RefValue(refs["dynamo/e0"], genuine.signer, genuine.signature),
        # alice's signature of e0 replayed for another digest
        "dynamo/e0": RefValue(evil_digest, genuine.signer, genuine.signature),
        # alice's signature with one bit changed
        "dynamo/e1": RefValue(
            refs["dynamo/e1"],
            keys["alice"],
            (lambda s: s[:10] + ("0" if s[10] != "0" else "1") + s[11:])(
                (remote.get_ref_value("dynamo/e1") or genuine).signature or ""
            ),
        ),
        # not a ref value at all
        "dynamo/garbage": "not a digest",
    }
    for name, value in plants.items():
        evil.set_ref(name, evil_digest)
        _plant(remote, evil, name, value)

    dst = Store(tmp_path / "dst")
    layer = RemoteLayer(Remote(redis_server.url), dst, trust=TrustPolicy.resolve([keys["alice"]]))
    assert _accepted(layer, list(plants)) == []
    assert layer.remote.stats()["untrusted"] == len(plants) - 1  # the garbage is corrupt, not a signature
    assert layer.remote.stats()["corrupt"] == 1
    assert layer.refusal("dynamo/planted") == "the remote ref is not signed"
    assert "does not verify" in (layer.refusal("dynamo/mallory") or "")
    assert not dst.contains(evil_digest) and dst.refs() == []

    report = pull(
        dst, Remote(redis_server.url), [n for n in plants if n != "dynamo/garbage"], trusted_keys=[keys["alice"]]
    )
    assert report.refs == 0 and sorted(report.untrusted) == sorted(n for n in plants if n != "dynamo/garbage")
    assert not dst.contains(evil_digest) and dst.refs() == []
    assert not marker.exists()


def test_pull_keeps_going_past_refused_refs_and_a_trusted_host_shares(
    redis_server: Any, tmp_path: Path, keys: dict[str, str]
) -> None:
    remote = Remote(redis_server.url)
    src = Store(tmp_path / "src")
    refs = make_entries(src, 3)
    push(src, remote, signing_key=tmp_path / "alice.key")
    evil = _evil_store(tmp_path, "dynamo/e1", tmp_path / "marker")
    _plant(remote, evil, "dynamo/e1", evil.get_ref("dynamo/e1") or "")

    dst = Store(tmp_path / "dst")
    report = pull(dst, remote, trusted_keys=[keys["alice"]])
    assert report.untrusted == ["dynamo/e1"] and report.refs == 2
    assert {n: dst.get_ref(n) for n in dst.refs()} == {n: refs[n] for n in ("dynamo/e0", "dynamo/e2")}
    assert load_entry(dst, "dynamo/e0") == load_entry(src, "dynamo/e0")
    # Nothing trusted: nothing read, unless the opt-in says otherwise.
    with pytest.raises(UntrustedError, match="no trusted keys"):
        pull(Store(tmp_path / "none"), remote, allow_unsigned=False)
    assert pull(Store(tmp_path / "opt-in"), remote, allow_unsigned=True).refs == 3


def test_the_command_line_signs_pushes_and_pulls_only_what_a_trusted_key_signed(
    redis_server: Any, tmp_path: Path, keys: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("PRECOMPILE_SIGNING_KEY", "PRECOMPILE_TRUSTED_KEYS", "PRECOMPILE_ALLOW_UNSIGNED"):
        monkeypatch.delenv(name, raising=False)
    src = Store(tmp_path / "src")
    refs = make_entries(src, 2)
    pushed = run_precompile("--store", tmp_path / "src", "push", redis_server.url, "--sign", tmp_path / "alice.key")
    assert pushed.returncode == 0, pushed.stderr
    evil = _evil_store(tmp_path, "dynamo/e1", tmp_path / "marker")
    _plant(Remote(redis_server.url), evil, "dynamo/e1", evil.get_ref("dynamo/e1") or "")
    pulled = run_precompile(
        "--store", tmp_path / "dst", "pull", redis_server.url, "--trusted-key", keys["alice"], "--json"
    )
    assert pulled.returncode == 0, pulled.stderr
    doc = json.loads(pulled.stdout)
    assert doc["refs"] == 1 and doc["untrusted"] == ["dynamo/e1"]
    assert "dynamo/e1" in pulled.stderr
    dst = Store(tmp_path / "dst")
    assert dst.refs() == ["dynamo/e0"] and dst.get_ref("dynamo/e0") == refs["dynamo/e0"]
    refused = run_precompile("--store", tmp_path / "none", "pull", redis_server.url)
    assert refused.returncode == 1 and "no trusted keys" in refused.stderr.replace("\n", " ")


def test_a_host_without_a_signing_key_reads_but_does_not_publish(
    redis_server: Any, tmp_path: Path, keys: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PRECOMPILE_SIGNING_KEY", raising=False)
    src = Store(tmp_path / "src")
    make_entries(src, 1)
    with pytest.raises(UntrustedError, match="signing key"):
        push(src, Remote(redis_server.url))
    layer = RemoteLayer(Remote(redis_server.url), src, trust=TrustPolicy.resolve([keys["alice"]]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert layer.push(["dynamo/e0"]) is None
        assert layer.push(["dynamo/e0"]) is None
    assert [type(w.message) for w in caught] == [PrecompileWarning]
    assert Remote(redis_server.url).refs() == []
    proc = run_precompile("--store", tmp_path / "src", "push", redis_server.url)
    assert proc.returncode == 2 and "needs a signing key" in proc.stderr.replace("\n", " ")


def test_no_trusted_keys_loads_nothing_from_the_remote_and_says_so_once(
    redis_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PRECOMPILE_TRUSTED_KEYS", raising=False)
    monkeypatch.delenv("PRECOMPILE_ALLOW_UNSIGNED", raising=False)
    src = Store(tmp_path / "src")
    make_entries(src, 1)
    push(src, Remote(redis_server.url), signing_key=tmp_path / "k.key" if keygen(tmp_path / "k.key") else None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        layered = open_layered(str(tmp_path / "dst"), [], Remote(redis_server.url))
        assert layered.get_ref("dynamo/e0") is None
    assert len(caught) == 1 and "allow_unsigned" in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opted = open_layered(str(tmp_path / "opt"), [], Remote(redis_server.url), allow_unsigned=True)
        assert opted.get_ref("dynamo/e0") == src.get_ref("dynamo/e0")


def test_bundles_need_a_trusted_key_or_the_opt_in(
    tmp_path: Path, keys: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PRECOMPILE_TRUSTED_KEYS", raising=False)
    monkeypatch.delenv("PRECOMPILE_ALLOW_UNSIGNED", raising=False)
    src = Store(tmp_path / "src")
    make_entries(src, 1)
    unsigned = tmp_path / "unsigned.bundle"
    src.export_bundle(None, unsigned)
    for source in (unsigned, open_bundle(unsigned)):
        with pytest.raises(UntrustedError, match="no trusted keys"):
            open_layered(str(tmp_path / "local"), [source])
    assert not (tmp_path / "local").exists()
    with pytest.raises(UntrustedError, match="no trusted keys"):
        Store(tmp_path / "dst").import_bundle(unsigned)
    assert Store(tmp_path / "dst").refs() == []
    refused = run_precompile("--store", tmp_path / "cli", "import", unsigned)
    assert refused.returncode == 1 and "no trusted keys" in refused.stderr
    # Inspection stays permissive; the opt-in, by argument or environment, opens the rest.
    assert open_bundle(unsigned).refs() == ["dynamo/e0"]
    assert Store(tmp_path / "dst").import_bundle(unsigned, allow_unsigned=True).refs == 1
    monkeypatch.setenv("PRECOMPILE_ALLOW_UNSIGNED", "1")
    assert open_layered(str(tmp_path / "local"), [unsigned]).get_ref("dynamo/e0") == src.get_ref("dynamo/e0")


def test_a_bundle_opened_unverified_is_verified_once_its_signature_is_relied_on(
    tmp_path: Path, keys: dict[str, str]
) -> None:
    src = Store(tmp_path / "src")
    blob = b"original pickle bytes " * 100
    digest = src.put(blob)
    src.set_ref("dynamo/k", src.put_manifest([digest], {"kind": "entry"}))
    path = tmp_path / "signed.bundle"
    src.export_bundle(None, path, sign_with=tmp_path / "alice.key")
    data = path.read_bytes()
    at = data.index(blob)
    changed = blob.replace(b"original", b"planted!")
    path.write_bytes(data[:at] + changed + data[at + len(changed) :])  # same length, after signing
    bundle = open_bundle(path, verify=False)
    layered = open_layered(str(tmp_path / "local"), [bundle], trusted_keys=[keys["alice"]])
    with pytest.raises(CorruptObjectError):
        layered.get(digest)


def test_a_failed_keygen_leaves_no_key_file(tmp_path: Path) -> None:
    """A keygen whose write fails (here: a file size limit of 0) leaves nothing behind,
    so the next one succeeds."""
    path = tmp_path / "new.key"
    script = (
        "import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
        "resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0)); import precompile\n"
        "try:\n    precompile.keygen(sys.argv[1])\nexcept OSError as e:\n    print(type(e).__name__)\n"
    )
    env = {**os.environ, "PYTHONPATH": PACKAGE_ROOT}
    out = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip(), out.stderr
    assert not path.exists()
    assert [p for p in os.listdir(tmp_path) if p.startswith(".new.key")] == []
    assert keygen(path).startswith("ed25519:")


def test_a_trusted_keys_file_others_may_write_is_refused(tmp_path: Path, keys: dict[str, str]) -> None:
    """Like ssh's authorized_keys."""
    listing = tmp_path / "trusted"
    listing.write_text(keys["alice"] + "\n")
    for mode in (0o666, 0o664):
        listing.chmod(mode)
        with pytest.raises(UntrustedError, match="writable by other users"):
            open_bundle(tmp_path / "x", trusted_keys=[listing])
        with pytest.raises(UntrustedError, match="writable by other users"):
            TrustPolicy.resolve([listing])
    listing.chmod(0o644)
    assert TrustPolicy.resolve([listing]).specs == [keys["alice"]]


def test_ref_values_parse_or_miss() -> None:
    d = "ab" * 32
    assert parse_ref_value(d) == RefValue(d)
    signed = RefValue(d, "ed25519:" + "cd" * 32, "ef" * 64)
    assert parse_ref_value(signed.encode().encode()) == signed
    for bad in (b"", b"\xff" * 64, d + " x", d + " ed25519:aa " + "ef" * 64 + " extra", "AB" * 32):
        assert parse_ref_value(bad) is None


def _double_plus_one(x: Any) -> Any:
    return x * 2 + 1


@pytest.mark.torch
def test_a_planted_entry_never_runs_inside_torch_compile(
    redis_server: Any, tmp_path: Path, keys: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = pytest.importorskip("torch")
    from torch._dynamo.utils import counters

    from precompile import _torch as tc
    from precompile.entries import entry_ref, environment
    from precompile.schema import EntryMeta, PickledRef, SourceLocation

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.delenv("PRECOMPILE_SIGNING_KEY", raising=False)
    key = tc.source_id_from_fn(_double_plus_one)
    name = entry_ref(key, "cpu")
    marker = tmp_path / "payload-ran"
    evil = Store(tmp_path / "evil")
    record = evil.put(pickle.dumps(_Payload(str(marker))))
    meta = EntryMeta(
        key=key,
        torch=tc.TORCH_VERSION,
        triton=None,
        device_type="cpu",
        source=SourceLocation("_double_plus_one", None, None),
        dynamo=PickledRef(record),
        backends={},
        env=environment("cpu"),
    ).to_json()
    evil.set_ref(name, evil.put_manifest([record], meta))
    _plant(Remote(redis_server.url), evil, name, evil.get_ref(name) or "")
    x = torch.arange(4.0)

    def run(host: str, **trust: Any) -> Any:
        torch._dynamo.reset()
        counters.clear()
        try:
            precompile.install(tmp_path / host, remote=redis_server.url, save_on_exit=False, **trust)
            # A miss warns once per process (explain); which one comes first is not the point here.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PrecompileWarning)
                return torch.compile(_double_plus_one)(x)
        finally:
            precompile.uninstall()
            torch._dynamo.reset()

    # The payload is real: a host that opted into unsigned entries runs it
    # (what it unpickles to is no entry, so what happens next does not matter).
    with contextlib.suppress(Exception):
        run("control", allow_unsigned=True)
    assert marker.is_dir()
    marker.rmdir()
    # A host that trusts alice's key refuses it, says why, and compiles.
    assert torch.equal(run("victim", trusted_keys=[keys["alice"]]), x * 2 + 1)
    assert not marker.exists()
    assert counters["precompile_remote"]["untrusted"] == 1
    assert counters["precompile"]["miss_untrusted"] == 1
    assert Store(tmp_path / "victim").get_ref(name) is None
