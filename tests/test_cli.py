"""The command line, run as a real `python -m precompile` subprocess."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from support.processes import run_precompile
from support.synthetic import blob_bytes, load_entry, make_entries

import precompile
from precompile import Store


def cli_json(*args: object) -> Any:
    proc = run_precompile(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def filled_store(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A store of three synthetic entries, and their refs."""
    root = tmp_path / "store"
    refs = make_entries(Store(root), 3)
    return root, refs


def test_export_import_round_trip(filled_store: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    root, refs = filled_store
    bundle = tmp_path / "ship.bundle"
    exported = run_precompile("--store", root, "export", bundle)
    assert exported.returncode == 0, exported.stderr
    # The console wraps long lines: compare words.
    assert "3 refs" in " ".join(exported.stdout.split()) and bundle.is_file()

    served = tmp_path / "served"
    imported = cli_json("--store", served, "import", bundle, "--allow-unsigned")
    assert imported["refs"] == imported["refs_changed"] == 3 and imported["objects_present"] == 0
    again = cli_json("--store", served, "import", bundle, "--allow-unsigned")
    assert again["objects_new"] == 0 and again["refs_changed"] == 0

    a, b = Store(root), Store(served)
    for ref in refs:
        assert load_entry(a, ref) == load_entry(b, ref)
    listed = cli_json("--store", served, "ls")
    assert [r["name"] for r in listed] == sorted(refs)
    assert cli_json("--store", served, "verify")["ok"]

    # Only the named refs, and the read commands work on the bundle file itself.
    one = tmp_path / "one.bundle"
    assert run_precompile("--store", root, "export", one, "dynamo/e1").returncode == 0
    assert [r["name"] for r in cli_json("--store", one, "ls")] == ["dynamo/e1"]
    assert cli_json("--store", one, "verify")["ok"]


def test_every_read_command_prints_json(filled_store: tuple[Path, dict[str, str]]) -> None:
    root, refs = filled_store
    ls = cli_json("--store", root, "ls", "dynamo/e")
    assert {r["name"]: r["digest"] for r in ls} == refs
    assert all(r["bytes"] >= r["unique_bytes"] > 0 for r in ls)

    show = cli_json("--store", root, "show", "dynamo/e0")
    nodes = {n["digest"]: n for n in show["nodes"]}
    root_node = show["nodes"][0]
    assert root_node["digest"] == show["root"] == refs["dynamo/e0"] and root_node["meta"]["kind"] == "entry"
    assert [nodes[c]["meta"]["kind"] for c in root_node["children"]] == ["backend", "backend"]
    assert show["total_bytes"] == load_entry(Store(root), "dynamo/e0")["bytes"]
    assert len(nodes) == len(show["nodes"]) == show["objects"] == load_entry(Store(root), "dynamo/e0")["blobs"]

    stats = cli_json("--store", root, "stats")
    assert stats["entries"] == 3 and stats["dedup_ratio"] > 1  # the shared blob
    assert stats["bytes"] > stats["referenced_bytes"] == stats["stored_bytes"]
    assert len(stats["largest"]) == 3 and {"hits", "misses", "blobs"} <= stats.keys()

    verify = cli_json("--store", root, "verify")
    assert verify["ok"] and verify["objects"] == stats["blobs"]

    du = cli_json("--store", root, "du")
    assert [r["name"] for r in du["refs"]] and du["unreferenced_bytes"] == 0

    dry = cli_json("--store", root, "gc", "--dry-run", "--max-size", "1K", "--grace", "0")
    assert dry["dry_run"] and len(dry["refs_evicted"]) == 3
    assert Store(root).refs() == sorted(refs)  # a dry run changes nothing

    text = run_precompile("--store", root, "show", "dynamo/e0")
    assert text.returncode == 0 and "manifest" in text.stdout and "kind=entry" in text.stdout


def test_exit_codes(filled_store: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    root, _ = filled_store
    assert run_precompile("--store", root, "stats").returncode == 0
    assert run_precompile("--store", root, "frobnicate").returncode == 2
    assert run_precompile("--store", root).returncode == 2
    assert run_precompile("--store", root, "gc", "--max-size", "10X").returncode == 2
    for args in (
        ("--store", tmp_path / "absent", "ls"),
        ("--store", root, "show", "dynamo/nope"),
        ("--store", root, "export", tmp_path / "x.bundle", "dynamo/nope"),
    ):
        proc = run_precompile(*args)
        assert proc.returncode == 2, proc
        assert proc.stderr.startswith("precompile: error:") and "Traceback" not in proc.stderr

    # A problem found: a corrupt object makes verify exit 1 and name it.
    opened = Store(root)
    victim = Path(opened.object_path(opened.put(blob_bytes("victim", 5000))))
    victim.chmod(0o644)
    victim.write_bytes(b"tampered")
    proc = run_precompile("--store", root, "verify")
    assert proc.returncode == 1 and "corrupt" in proc.stdout
    assert run_precompile("--store", root, "verify", "--json").returncode == 1

    bad = tmp_path / "not-a.bundle"
    bad.write_bytes(b"PCBUNDLE" + bytes(200))
    proc = run_precompile("--store", tmp_path / "fresh", "import", bad, "--allow-unsigned")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "error" in proc.stderr


def test_gc_max_size_keeps_the_most_recently_used_refs(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = Store(root)
    for i in range(4):
        leaf = store.put(blob_bytes(f"entry {i}", 100_000))
        store.set_ref(f"dynamo/e{i}", store.put_manifest([leaf], {"i": i}))
    # Use order, oldest first: e2, e0, e3, e1 (loads call touch_ref on every hit).
    for name in ("dynamo/e2", "dynamo/e0", "dynamo/e3", "dynamo/e1"):
        time.sleep(0.02)
        assert store.touch_ref(name)

    proc = run_precompile("--store", root, "gc", "--max-size", "250K", "--grace", "0")
    assert proc.returncode == 0, proc.stderr
    assert Store(root).refs() == ["dynamo/e1", "dynamo/e3"]
    assert Store(root).stats().bytes <= 250 * 1024
    assert cli_json("--store", root, "verify")["ok"]

    # Under the cap already: nothing more goes.
    again = cli_json("--store", root, "gc", "--max-size", "250K", "--grace", "0")
    assert again["refs_evicted"] == [] and again["objects_freed"] == 0


def test_show_prints_each_node_once_however_shared_or_deep(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    leaf = store.put(blob_bytes("leaf", 100))
    # A diamond 22 levels deep: 2**22 paths from the top, 45 distinct objects.
    a = b = leaf
    for level in range(22):
        a, b = (store.put_manifest([a, b] if level else [a], {"side": side, "level": level}) for side in "ab")
    store.set_ref("dynamo/diamond", store.put_manifest([a, b], {"kind": "top"}))
    # A chain 3,000 manifests deep.
    node = leaf
    for depth in range(3000):
        node = store.put_manifest([node], {"depth": depth})
    store.set_ref("dynamo/chain", node)

    start = time.monotonic()
    diamond = cli_json("--store", tmp_path / "store", "show", "dynamo/diamond")
    assert diamond["objects"] == len(diamond["nodes"]) == 2 * 22 + 2
    assert len({n["digest"] for n in diamond["nodes"]}) == diamond["objects"]
    text = run_precompile("--store", tmp_path / "store", "show", "dynamo/diamond")
    assert text.returncode == 0, text.stderr
    expanded = [line for line in text.stdout.splitlines()[1:] if "shown above" not in line]
    assert len(expanded) == diamond["objects"]  # each node expanded exactly once
    assert time.monotonic() - start < 30

    chain = cli_json("--store", tmp_path / "store", "show", "dynamo/chain")
    assert chain["objects"] == 3001 and chain["nodes"][-1]["digest"] == leaf
    text = run_precompile("--store", tmp_path / "store", "show", "dynamo/chain")
    assert text.returncode == 0 and "RecursionError" not in text.stderr, text.stderr[-2000:]
    lines = text.stdout.splitlines()
    assert len(lines) == 3002 and "3000> blob" in lines[-1]  # deep lines say their depth
    assert max(map(len, lines)) < 200


def test_keygen_and_signed_export(filled_store: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    root, refs = filled_store
    key = tmp_path / "release.key"
    made = run_precompile("keygen", key)
    assert made.returncode == 0, made.stderr
    public = made.stdout.strip()
    assert public.startswith("ed25519:") and len(public.splitlines()) == 1
    assert key.stat().st_mode & 0o777 == 0o600
    again = run_precompile("keygen", key)
    assert again.returncode == 1 and "exists" in again.stderr and "Traceback" not in again.stderr

    bundle = tmp_path / "signed.bundle"
    exported = run_precompile("--store", root, "export", bundle, "--sign", key)
    assert exported.returncode == 0 and "signed" in exported.stdout, exported.stderr
    assert precompile.open_bundle(bundle, trusted_keys=[public]).refs() == sorted(refs)
    verified = cli_json("--store", bundle, "verify")
    assert verified["ok"] and verified["signer"] == public

    # Import honours --trusted-key and $PRECOMPILE_TRUSTED_KEYS.
    other = run_precompile("keygen", tmp_path / "other.key").stdout.strip()
    refused = run_precompile("--store", tmp_path / "a", "import", bundle, "--trusted-key", other)
    assert refused.returncode == 1 and "not a trusted key" in refused.stderr
    refused = run_precompile("--store", tmp_path / "b", "import", bundle, env={"PRECOMPILE_TRUSTED_KEYS": other})
    assert refused.returncode == 1 and "not a trusted key" in refused.stderr
    assert cli_json("--store", tmp_path / "c", "import", bundle, "--trusted-key", public)["refs"] == len(refs)
    assert run_precompile("--store", bundle, "ls", env={"PRECOMPILE_TRUSTED_KEYS": other}).returncode == 1
