"""A serving process for the multi-process tests.

    python serving_worker.py SOURCE GO_FILE

Opens SOURCE (a bundle file or a store directory), waits until GO_FILE
exists so that all workers start loading together, loads every entry, and
prints the results as JSON on the last line of stdout.
"""

from __future__ import annotations

import json
import os
import sys
import time

from support.synthetic import load_entry

from precompile import Bundle, Store, open_bundle
from precompile.bundle import load_all


def main() -> None:
    source_path, go = sys.argv[1:3]
    source: Store | Bundle
    if os.path.isdir(source_path):
        source = Store(source_path, create=False)
    else:
        source = bundle = open_bundle(source_path)
        load_all(bundle)  # verify in parallel and prefetch, as a server would at startup
    deadline = time.monotonic() + 60
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            raise SystemExit("never told to go")
        time.sleep(0.002)
    results = {ref: load_entry(source, ref) for ref in source.refs()}
    print(json.dumps(results))


if __name__ == "__main__":
    main()
