"""`verify` names the refs that reach each damaged object; `verify --repair` fetches it
again from a layer, bundle or remote that holds it intact, else drops exactly those refs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from precompile import Store
from precompile.cli import main
from precompile.remote import Remote, push
from precompile.repair import repair


def damage(store: Store, digest: str) -> None:
    path = Path(store.object_path(digest))
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.unlink()
    path.write_bytes(bytes(data))


def two_entries(store: Store) -> tuple[str, str, str]:
    """Refs a and b share `shared`; only a reaches `own`. Returns (shared, own, b's leaf)."""
    shared, own, other = store.put(b"shared blob"), store.put(b"a's own blob"), store.put(b"b's blob")
    inner = store.put_manifest([own])
    store.set_ref("env/a", store.put_manifest([shared, inner]))
    store.set_ref("env/b", store.put_manifest([shared, other]))
    return shared, own, other


def test_verify_names_the_refs_that_reach_damage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = Store(tmp_path / "s")
    shared, own, _ = two_entries(store)
    stray = store.put(b"no ref reaches this")
    for d in (shared, own, stray):
        damage(store, d)
    report = store.verify()
    assert sorted(report.corrupt) == sorted([shared, own, stray])
    assert report.holders == {shared: ["env/a", "env/b"], own: ["env/a"]}
    assert main(["--store", str(tmp_path / "s"), "verify"]) == 1
    text = capsys.readouterr().out
    assert f"{own} (reached by env/a)" in text and f"{stray} (no ref reaches it)" in text


def test_repair_fetches_damaged_objects_from_a_bundle_layer(tmp_path: Path, signed_fleet: tuple[str, str]) -> None:
    store = Store(tmp_path / "s")
    shared, own, _ = two_entries(store)
    store.export_bundle(["env/a", "env/b"], str(tmp_path / "backup.bundle"), sign_with=signed_fleet[0])
    damage(store, shared)
    Path(store.object_path(own)).unlink()
    report = repair(store, layers=[tmp_path / "backup.bundle"])
    assert sorted(report.refetched) == sorted([shared, own])
    assert report.ok and not report.dropped
    assert store.verify().ok
    assert bytes(store.get(own)) == b"a's own blob"


def test_repair_drops_exactly_the_refs_that_reach_what_no_source_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = Store(tmp_path / "s")
    shared, own, other = two_entries(store)
    other_store = Store(tmp_path / "other")
    other_store.put(b"shared blob")  # holds `shared` but not `own`
    damage(store, shared)
    damage(store, own)
    code = main(["--store", str(tmp_path / "s"), "verify", "--repair", "--layer", str(tmp_path / "other"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1
    assert doc["refetched"] == [shared]
    assert doc["dropped"] == {"env/a": [own]}
    assert not doc["ok"]
    assert store.refs() == ["env/b"]
    assert store.verify().corrupt == [own]  # garbage now: gc frees it
    assert main(["--store", str(tmp_path / "s"), "verify", "--repair"]) == 0
    assert "repaired: 0 objects fetched again" in capsys.readouterr().out
    assert bytes(store.get(other)) == b"b's blob"


def test_repair_fetches_from_a_remote(tmp_path: Path, redis_server: object, signed_fleet: tuple[str, str]) -> None:
    url = redis_server.url  # type: ignore[attr-defined]
    store = Store(tmp_path / "s")
    shared, own, _ = two_entries(store)
    push(store, Remote(url), ["env/a", "env/b"])
    damage(store, own)
    report = repair(store, remote=url)
    assert report.refetched == [own] and report.ok
    assert store.verify().ok
