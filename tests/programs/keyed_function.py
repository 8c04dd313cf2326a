"""One process of a user's program that compiles one function of a module file, run as a subprocess.

    python keyed_function.py STORE MODULE_DIR OUT_JSON

Imports `kmodel` from MODULE_DIR (the checkout it runs from), compiles and
calls `kmodel.f` with precompile installed at STORE, saves, and writes
torch's counters to OUT_JSON.
"""

from __future__ import annotations

import json
import sys

import torch

import precompile


def main() -> None:
    store, module_dir, out = sys.argv[1:4]
    sys.path.insert(0, module_dir)
    precompile.install(store, save_on_exit=False)
    import kmodel  # type: ignore[import-not-found]

    compiled = torch.compile(kmodel.f)
    compiled(torch.ones(3))
    precompile.save()
    from torch._dynamo.utils import counters

    with open(out, "w", encoding="utf-8") as f:
        json.dump({"counters": {group: dict(c) for group, c in counters.items()}}, f)


if __name__ == "__main__":
    main()
