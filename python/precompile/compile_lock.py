"""The per-key compile lock: one process of a host compiles a function, the others wait for its entry."""

from __future__ import annotations

import errno
import fcntl
import os
import time

# Where the lock files live, inside the store's `locks/` (docs/FORMAT.md §1.7).
_PREFIX = "compile-"
# How often a waiter tries the lock again. An `flock` wait cannot be given a
# deadline, so a waiter polls; a compile takes seconds, so this costs nothing.
_POLL_S = 0.05


def lock_path(store_root: str | os.PathLike[str], key: str) -> str:
    """The lock file of entry key `key` (a hex digest) in the store at `store_root`."""
    if not key or not all(c in "0123456789abcdef" for c in key):
        raise ValueError(f"not an entry key: {key!r}")
    return os.path.join(os.fspath(store_root), "locks", f"{_PREFIX}{key}")


class CompileLock:
    """An exclusive `flock` on one entry key's lock file.

    The holder is the process compiling that key; the kernel releases the lock
    when the holder exits, however it exits (`kill -9` included), so a waiter
    never waits on a dead process. The file is opened read-only and without
    following a symlink, as the store's other lock files are: a lock needs no
    write access, and a link planted in `locks/` is refused, not followed.
    """

    def __init__(self, store_root: str | os.PathLike[str], key: str) -> None:
        self.path = lock_path(store_root, key)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        """Take the lock if no other process holds it; never blocks."""
        if self._fd is not None:
            return True
        fd = os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                return False
            raise
        self._fd = fd
        return True

    def acquire(self, timeout: float) -> bool:
        """Take the lock, waiting at most `timeout` seconds; whether it was taken."""
        deadline = time.monotonic() + max(timeout, 0.0)
        while not self.try_acquire():
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_S)
        return True

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            # Closing the only descriptor releases the flock.
            os.close(fd)
