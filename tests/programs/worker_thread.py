"""One side of a worker-thread warm-start test, run as a subprocess.

    python worker_thread.py NAME compile|load STORE OUT_JSON

`install()` runs in the main thread and the model is compiled there, but its
first calls run in worker threads, as a serving process's request pool calls
it: `one` in a single worker thread, `pool` in four threads (two models, two
threads each), started together in the loading process. The compiling
process makes those calls in one worker thread: torch 2.11 crashes
(SIGSEGV, entering a fake tensor mode) when a second thread compiles a code
another thread compiled, with or without a store.
Writes the outputs (OUT_JSON.pt) and the counters (OUT_JSON).
"""

from __future__ import annotations

import json
import sys
import threading

import torch

import precompile


class Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.up = torch.nn.Linear(width, 2 * width)
        self.down = torch.nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(self.up(x).relu())


def main() -> None:
    name, mode, store, out_path = sys.argv[1:5]
    from torch._dynamo.utils import counters

    precompile.install(store, save_on_exit=False)
    torch.manual_seed(0)
    models = [torch.compile(Block(8)), torch.compile(Block(16))]
    calls = [(0, 8)] if name == "one" else [(0, 8), (1, 16), (0, 8), (1, 16)]
    outputs: list[torch.Tensor | None] = [None] * len(calls)

    def serve(i: int, which: int, width: int) -> None:
        with torch.no_grad():
            outputs[i] = models[which](torch.full((4, width), float(i + 1)))

    if mode == "compile":
        threads = [threading.Thread(target=lambda: [serve(i, *call) for i, call in enumerate(calls)])]
    else:
        threads = [threading.Thread(target=serve, args=(i, *call)) for i, call in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report = sorted(precompile.save().entries) if mode == "compile" else None
    torch.save(outputs, out_path + ".pt")
    with open(out_path, "w") as f:
        json.dump(
            {
                "counters": {k: dict(v) for k, v in counters.items()},
                "report": report,
                "graphs": counters["stats"]["unique_graphs"],
            },
            f,
        )


if __name__ == "__main__":
    main()
