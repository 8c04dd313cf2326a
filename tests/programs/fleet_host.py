"""One host of a mixed-version fleet, run as a subprocess by any torch's Python.

    python fleet_host.py STORE REMOTE_URL|- OUT_JSON

Installs precompile on STORE (and the remote, unless `-`), compiles and runs
one function, saves, and writes the torch version, the function's output,
torch's counters and the entry refs it sees as JSON. Only the standard
library, torch and precompile: it runs under every supported torch.
"""

from __future__ import annotations

import json
import sys

import torch

import precompile


def step(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) * 2 + torch.cos(x).sum(-1, keepdim=True)


def main() -> None:
    store, remote, out = sys.argv[1:4]
    cache = precompile.install(store, remote=None if remote == "-" else remote, save_on_exit=False)
    fn = torch.compile(step)
    with torch.no_grad():
        y = fn(torch.arange(12, dtype=torch.float32).reshape(3, 4))
    report = precompile.save()
    from torch._dynamo.utils import counters

    from precompile._torch import source_id_from_fn
    from precompile.entries import entry_ref

    key = source_id_from_fn(step)
    result = {
        "torch": torch.__version__,
        "key": key,
        "ref": entry_ref(key, "cpu"),
        "output": y.tolist(),
        "saved": report.refs,
        "local_refs": cache.writable.refs("dynamo/"),
        "counters": {group: dict(values) for group, values in counters.items()},
    }
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
