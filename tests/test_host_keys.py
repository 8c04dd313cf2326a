"""Memoized install hashes: served only to an unchanged installation."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.processes import PROGRAMS, last_line, run_python

from precompile.host_keys import TOO_NEW_S, fingerprint

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

CHILD = PROGRAMS / "host_keys_child.py"


def _run(store: Path | str, gpu: bool, pythonpath: list[Path] | None = None) -> dict:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath), env.get("PYTHONPATH", "")])
    proc = run_python(CHILD, store, "1" if gpu else "0", env=env, timeout=600, tail=4000)
    return json.loads(last_line(proc.stdout))


def test_second_process_uses_the_memo_and_gets_the_same_values(tmp_path: Path) -> None:
    store = tmp_path / "store"
    first = _run(store, gpu=True)
    assert first["counters"].get("torch_key_memo_miss") == 1
    assert first["counters"].get("triton_key_memo_miss") == 1
    second = _run(store, gpu=True)
    assert second["counters"].get("torch_key_memo_hit") == 1, second
    assert second["counters"].get("triton_key_memo_hit") == 1, second
    plain = _run("-", gpu=True)
    # What torch and Triton compute themselves, byte for byte.
    assert second["torch_key"] == first["torch_key"] == plain["torch_key"]
    assert second["triton_key"] == first["triton_key"] == plain["triton_key"]


def _linked_copy(src: Path, dst: Path) -> None:
    """A copy of a package whose files are symlinks to the original's."""
    for directory, subdirs, files in os.walk(src):
        subdirs[:] = [d for d in subdirs if d != "__pycache__"]
        target = dst / Path(directory).relative_to(src)
        target.mkdir(parents=True, exist_ok=True)
        for name in files:
            os.symlink(os.path.join(directory, name), target / name)


def test_a_changed_triton_install_is_never_served_a_stale_key(tmp_path: Path) -> None:
    installed = Path(triton.__file__).parent
    site = tmp_path / "site"
    _linked_copy(installed, site / "triton")
    store = tmp_path / "store"
    before = _run(store, gpu=True, pythonpath=[site])
    assert Path(before["triton_file"]).is_relative_to(site)
    assert _run(store, gpu=True, pythonpath=[site])["counters"].get("triton_key_memo_hit") == 1
    # An upgrade that changes one hashed source file: replaced, as an
    # installer replaces it.
    changed = site / "triton" / "language" / "core.py"
    text = changed.read_text()
    changed.unlink()
    changed.write_text(text + "\n# changed\n")
    after = _run(store, gpu=True, pythonpath=[site])
    assert after["counters"].get("triton_key_memo_hit") is None, after
    assert after["counters"].get("triton_key_memo_miss") == 1
    assert after["triton_key"] != before["triton_key"]
    assert after["triton_key"] == _run("-", gpu=True, pythonpath=[site])["triton_key"]
    # torch did not change: its memo still serves.
    assert after["counters"].get("torch_key_memo_hit") == 1


def test_fingerprint_sees_an_edit_that_keeps_size_and_mtime(tmp_path: Path) -> None:
    f = tmp_path / "module.py"
    f.write_text("x = 1\n")
    # Just written: too new to trust its timestamps, so never memoized.
    assert fingerprint("k", [str(f)]) is None
    time.sleep(TOO_NEW_S + 0.2)
    st = f.stat()
    before = fingerprint("k", [str(f)])
    assert before is not None and fingerprint("k", [str(f)]) == before
    with open(f, "r+") as handle:  # same inode, same size
        handle.write("x = 2\n")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert f.stat().st_size == st.st_size and f.stat().st_mtime_ns == st.st_mtime_ns
    assert fingerprint("k", [str(f)]) is None
    time.sleep(TOO_NEW_S + 0.2)
    # ctime moved: a user cannot set it back.
    assert fingerprint("k", [str(f)]) not in (None, before)
    # A file that disappears (or appears) changes it too.
    g = tmp_path / "other.py"
    assert fingerprint("k", [str(f), str(g)]) != fingerprint("k", [str(f)])
    shutil.copy2(f, g)
    os.utime(g, ns=(st.st_atime_ns, st.st_mtime_ns))
    time.sleep(TOO_NEW_S + 0.2)
    assert fingerprint("k", [str(f), str(g)]) not in (None, fingerprint("k", [str(f)]))


def test_memos_stay_on_their_host(tmp_path: Path) -> None:
    """`ls`, `export` and `push` leave host memos out unless named."""
    import precompile
    from precompile.paths import shared_refs

    root = tmp_path / "store"
    store = precompile.Store(str(root))
    store.set_ref("dynamo/entry", store.put_manifest([store.put(b"code")], {"kind": "test"}))
    store.set_ref("host/torch_key/" + "0" * 64, store.put(b"ab" * 16))
    assert shared_refs(store.refs()) == ["dynamo/entry"]
    cli = [sys.executable, "-m", "precompile", "--store", str(root)]
    listed = json.loads(subprocess.run([*cli, "ls", "--json"], capture_output=True, check=True).stdout)
    assert [r["name"] for r in listed] == ["dynamo/entry"]
    asked = json.loads(subprocess.run([*cli, "ls", "host/", "--json"], capture_output=True, check=True).stdout)
    assert [r["name"] for r in asked] == ["host/torch_key/" + "0" * 64]
    bundle = tmp_path / "ship.bundle"
    subprocess.run([*cli, "export", str(bundle)], capture_output=True, check=True)
    assert precompile.open_bundle(str(bundle)).refs() == ["dynamo/entry"]
