"""Where things live by default, computed without importing torch.

The command line starts in well under a second because it never imports
torch; these rules mirror torch's own so that both agree on the same
directories.
"""

from __future__ import annotations

import getpass
import os
import re
import tempfile

__all__ = ["HOST_LOCAL_PREFIX", "default_store_path", "inductor_cache_dir", "is_host_local", "shared_refs"]

# Refs that describe this host, not compiled code (memoized install hashes,
# see `host_keys`): listed, sent and exported only when asked for by name.
HOST_LOCAL_PREFIX = "host/"


def is_host_local(ref: str) -> bool:
    return ref.startswith(HOST_LOCAL_PREFIX)


def shared_refs(refs: list[str]) -> list[str]:
    """`refs` without the host-local ones: what a push or export sends by default."""
    return [r for r in refs if not is_host_local(r)]


def inductor_cache_dir() -> str:
    """Inductor's cache dir, by torch's rule: `$TORCHINDUCTOR_CACHE_DIR`, else
    `<tempdir>/torchinductor_<user>` (the user name sanitized like torch does).

    Unlike torch, this neither creates the directory nor writes the variable
    back into the environment.
    """
    env = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if env is not None:
        return os.path.abspath(env)
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        user = f"uid_{os.getuid()}"
    user = re.sub(r'[\\/:*?"<>|]', "_", user)
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + user)


def default_store_path() -> str:
    """`$PRECOMPILE_STORE`, else `$XDG_CACHE_HOME/precompile`, else
    `~/.cache/precompile`.

    The store lives in the user's own cache directory, never at a predictable
    name in a world-writable one such as /tmp, where another local user could
    create it first and plant entries (loading an entry runs its code).
    """
    env = os.environ.get("PRECOMPILE_STORE")
    if env:
        return env
    # The XDG spec says a relative $XDG_CACHE_HOME is invalid and must be ignored.
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = xdg if os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "precompile")
