"""Only the user's own stores are trusted: a store owned by another user, or writable by
others, is refused unless it is opened as a shared store. Run with real uids: the test
runs as root and starts children as other users."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from precompile import Store, StoreError, UntrustedError
from precompile.paths import default_store_path

OWNER, OTHER, STRANGER, GROUP = 4242, 4243, 4244, 4300

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as other users")


def make_store(root: Path) -> str:
    store = Store(root)
    digest = store.put(b"planted or not" * 100)
    store.set_ref("dynamo/x", digest)
    return digest


def chown_tree(root: Path, uid: int, gid: int, dir_mode: int | None = None) -> None:
    for dirpath, _dirnames, filenames in os.walk(root):
        os.chown(dirpath, uid, gid)
        if dir_mode is not None:
            os.chmod(dirpath, dir_mode)
        for name in filenames:
            os.chown(os.path.join(dirpath, name), uid, gid)
            if dir_mode is not None:
                os.chmod(os.path.join(dirpath, name), 0o664)


def open_as(uid: int, root: Path, *, shared: bool, groups: tuple[int, ...] = ()) -> str:
    """Opens the store in a forked child running as `uid` (the interpreter itself may
    sit where other users cannot exec it); returns the outcome's name."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to the user, try, report, and never return
        outcome = "crashed"
        try:
            os.close(read)
            os.setgroups(list(groups))
            os.setgid(groups[0] if groups else uid)
            os.setuid(uid)
            try:
                store = Store(root, shared=shared)
                store.get_ref("dynamo/x")
                if groups:
                    store.put(b"written by a group member")
                outcome = "ok"
            except StoreError as e:
                outcome = f"{type(e).__name__} {e}"
        except BaseException as e:
            outcome = f"crashed {type(e).__name__} {e}"
        finally:
            os.write(write, outcome.encode())
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        outcome = f.read().decode()
    os.waitpid(pid, 0)
    assert not outcome.startswith("crashed"), outcome
    return outcome


@as_root
def test_another_users_store_is_refused_unless_shared(world_dir: Path) -> None:
    root = world_dir / "theirs"
    make_store(root)
    chown_tree(root, OWNER, OWNER)
    with pytest.raises(UntrustedError, match="owned by uid 4242"):
        Store(root)  # root gets no exemption: it would run uid 4242's code
    assert Store(root, shared=True).get_ref("dynamo/x") is not None

    mine = world_dir / "mine"
    make_store(mine)
    assert open_as(OTHER, mine, shared=False).startswith("UntrustedError")
    assert open_as(OTHER, mine, shared=True) == "ok"
    assert open_as(OWNER, root, shared=False) == "ok"


@as_root
def test_group_shared_store_needs_setgid_and_membership(world_dir: Path) -> None:
    root = world_dir / "team"
    make_store(root)
    chown_tree(root, OWNER, GROUP, dir_mode=0o2775)
    assert open_as(OTHER, root, shared=False, groups=(GROUP,)).startswith("UntrustedError")
    assert open_as(OTHER, root, shared=True, groups=(GROUP,)) == "ok"
    assert "not a member" in open_as(STRANGER, root, shared=True)
    # Even its owner opens a group-writable store only as a shared one.
    assert "writable by group" in open_as(OWNER, root, shared=False, groups=(GROUP,))
    with pytest.raises(UntrustedError):
        Store(root)

    # Group-writable without setgid: files would not keep the group.
    chown_tree(root, OWNER, GROUP, dir_mode=0o775)
    assert "setgid" in open_as(OTHER, root, shared=True, groups=(GROUP,))


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o2777])
def test_world_writable_store_is_always_refused(tmp_path: Path, mode: int) -> None:
    root = tmp_path / "open-to-all"
    make_store(root)
    root.chmod(mode)
    for shared in (False, True):
        with pytest.raises(UntrustedError, match="every user"):
            Store(root, shared=shared)
    (root / "refs").chmod(0o777)
    root.chmod(0o755)
    with pytest.raises(UntrustedError):
        Store(root)
    assert issubclass(UntrustedError, StoreError)


def test_default_store_is_in_the_users_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PRECOMPILE_STORE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_store_path() == str(tmp_path / "xdg" / "precompile")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/is/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_store_path() == str(tmp_path / "home" / ".cache" / "precompile")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_store_path() == str(tmp_path / "home" / ".cache" / "precompile")
    assert "torchinductor" not in default_store_path()
    monkeypatch.setenv("PRECOMPILE_STORE", str(tmp_path / "explicit"))
    assert default_store_path() == str(tmp_path / "explicit")
