"""A store's modes are right whatever the umask, every directory of it is checked, and
the check runs on what was opened, not on a path that can be swapped meanwhile."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from precompile import Store, UntrustedError

# Creates a store, a ref in a new namespace and an object under the umask given, in a
# child process (the umask is process-wide), then reopens it as a private store.
CREATE = """
import os, sys
os.umask(int(sys.argv[2], 8))
from precompile import Store
s = Store(sys.argv[1])
s.set_ref("dynamo/env/key", s.put(b"under umask"))
Store(sys.argv[1], create=False).get_ref("dynamo/env/key")
"""


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


@pytest.mark.parametrize("umask", ["002", "000", "077"])
def test_a_store_made_under_any_umask_is_private_and_opens(tmp_path: Path, umask: str) -> None:
    root = tmp_path / "s"
    proc = subprocess.run(
        [sys.executable, "-c", CREATE, str(root), umask], env=child_env(), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    for path in [root, *root.rglob("*")]:
        mode = path.lstat().st_mode
        assert not stat.S_ISLNK(mode)
        assert mode & 0o022 == 0, f"{path}: {mode:o}"
    Store(root, create=False).get_ref("dynamo/env/key")


def test_a_loose_directory_deep_in_the_store_is_refused(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    store.set_ref("dynamo/env/key", store.put(b"x"))
    (tmp_path / "s" / "refs" / "dynamo").chmod(0o777)
    reopened = Store(tmp_path / "s", create=False)
    with pytest.raises(UntrustedError, match="writable by every user"):
        reopened.get_ref("dynamo/env/key")
    with pytest.raises(UntrustedError):
        reopened.refs()
    with pytest.raises(UntrustedError):
        reopened.gc(grace_seconds=0)
    # A new namespace under a loose one is refused too, and nothing is written there.
    with pytest.raises(UntrustedError):
        reopened.set_ref("dynamo/env2/key", reopened.put(b"y"))
    assert not (tmp_path / "s" / "refs" / "dynamo" / "env2").exists()


def test_a_loose_fan_out_directory_is_refused_at_open(tmp_path: Path) -> None:
    Store(tmp_path / "s")
    (tmp_path / "s" / "objects" / "a7").chmod(0o777)
    with pytest.raises(UntrustedError, match="objects/a7"):
        Store(tmp_path / "s", create=False)


# Opens the store at argv[1] over and over for argv[2] seconds; prints how often it
# opened the attacker's store (the one whose "who" ref says so) as a private store.
OPENER = """
import sys, time
from precompile import Store, StoreError
path, seconds, attacker = sys.argv[1], float(sys.argv[2]), sys.argv[3]
fooled = opened = 0
end = time.monotonic() + seconds
while time.monotonic() < end:
    try:
        s = Store(path, create=False)
        fooled += s.get_ref("who") == attacker
        opened += 1
    except StoreError:
        pass
print(opened, fooled)
"""


def test_a_symlink_flip_never_opens_an_attackers_store_as_private(tmp_path: Path) -> None:
    """Whoever can write the store's parent swaps the path between the user's store and
    their own (group-writable, so refused as private) while the user opens it."""
    mine, theirs = Store(tmp_path / "mine"), Store(tmp_path / "theirs")
    mine.set_ref("who", mine.put(b"the user's store"))
    attacker = theirs.put(b"the attacker's store")
    theirs.set_ref("who", attacker)
    for path in [tmp_path / "theirs", *(tmp_path / "theirs").rglob("*")]:
        if path.is_dir():
            path.chmod(0o775)
    link = tmp_path / "store"
    link.symlink_to(tmp_path / "mine")
    opener = subprocess.Popen(
        [sys.executable, "-c", OPENER, str(link), "3", attacker],
        env=child_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    flips = 0
    while opener.poll() is None:
        target = tmp_path / ("theirs" if flips % 2 else "mine")
        tmp = tmp_path / f"link.{flips}"
        tmp.symlink_to(target)
        os.replace(tmp, link)
        flips += 1
        if flips % 64 == 0:
            time.sleep(0)
    out, _ = opener.communicate()
    opened, fooled = map(int, out.split())
    assert fooled == 0, f"opened the attacker's store as private {fooled} times of {opened}"
    assert opened > 0
