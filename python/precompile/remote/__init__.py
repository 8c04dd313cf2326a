"""The remote: a Redis server or cluster that a fleet of hosts shares entries through.

- `client`: `Remote`, objects and refs on the server, raising on faults;
- `layer`: `RemoteLayer`, the remote as the last read-only layer of a store,
  faults turned into misses;
- `sync`: `push`, `pull`, `remote_usage` and `remote_gc`, whole entries at a time;
- `trust`: `TrustPolicy`, `RefValue`: signed refs and which of them a reader accepts;
- `keys`, `manifest`, `counters`, `connection`: the key layout, manifest
  parsing, the counted figures and the Redis connection they share.

Nothing here imports torch: the command line and serving hosts use it as is.
"""

from __future__ import annotations

from .client import DEFAULT_CHUNK_SIZE, Remote, open_remote
from .connection import RemoteConfigError, RemoteError, redact_url
from .counters import COUNTERS, LiveCounters
from .keys import LAYOUT_VERSION
from .layer import RemoteLayer
from .manifest import MANIFEST_MAGIC, manifest_children
from .sync import SyncReport, local_closure, pull, pull_closure, push, remote_gc, remote_usage
from .trust import RefValue, TrustPolicy

__all__ = [
    "COUNTERS",
    "DEFAULT_CHUNK_SIZE",
    "LAYOUT_VERSION",
    "MANIFEST_MAGIC",
    "RefValue",
    "LiveCounters",
    "Remote",
    "RemoteConfigError",
    "RemoteError",
    "RemoteLayer",
    "SyncReport",
    "TrustPolicy",
    "local_closure",
    "manifest_children",
    "open_remote",
    "pull",
    "pull_closure",
    "redact_url",
    "push",
    "remote_gc",
    "remote_usage",
]
