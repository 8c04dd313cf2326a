"""Print the install hashes a process uses, as JSON.

    python host_keys_child.py STORE|- GPU(0|1)

With a store, the memoized hashes are primed from it first (and a miss
memoized into it); with `-`, torch and Triton compute them as they always do.
"""

from __future__ import annotations

import json
import sys

import triton
import triton.runtime.cache as triton_cache
from torch._dynamo.utils import counters
from torch._inductor import codecache

store_path, gpu = sys.argv[1], sys.argv[2] == "1"
if store_path != "-":
    import precompile
    from precompile import host_keys

    store = precompile.Store(store_path)
    host_keys.prime(store, store, gpu=gpu)
print(
    json.dumps(
        {
            "torch_key": codecache.torch_key().hex(),
            "triton_key": triton_cache.triton_key() if gpu else None,
            "triton_file": triton.__file__,
            "counters": dict(counters["precompile"]),
        }
    )
)
