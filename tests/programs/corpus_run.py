"""One side of the corpus warm-start test, run as a subprocess.

    python corpus_run.py MODELS compile|load STORE OUT_JSON

Installs precompile over STORE, runs each corpus model (comma-separated
MODELS) in turn, saves on `compile`, and writes the outputs plus each model's
counter deltas, so a failure names the model that recompiled. A model whose
call raises is recorded with its error, and the next model runs.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

import torch
from counts import delta, log_lines, snapshot

import precompile

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benches"))
import corpus


def main() -> None:
    names, mode, store, out_path = sys.argv[1:5]
    # transformers' models share decorator code (generic.py's `wrapper`), and
    # Dynamo compiles at most `recompile_limit` variants of one code object
    # per process, then runs it eagerly: past a handful of models, one
    # process would compile nothing more. Both sides raise it alike.
    torch._dynamo.config.recompile_limit = 64
    precompile.install(store, save_on_exit=False)
    outputs: list[torch.Tensor] = []
    per_model: dict[str, dict] = {}
    for name in names.split(","):
        before = snapshot()
        first_line = log_lines()
        start = time.perf_counter()
        try:
            result = corpus.run(name)
            error = None
        except Exception as e:
            # One model's failure (a torch bug in its compile) is that
            # model's test failure; the models after it still run.
            result = []
            error = "".join(traceback.format_exception_only(e)).strip()
        per_model[name] = {
            "error": error,
            "compiler_log_lines": [first_line, log_lines()],
            "seconds": time.perf_counter() - start,
            "outputs": [len(outputs), len(outputs) + len(result)],
            "counters": delta(before, snapshot()),
        }
        outputs += result
    report = None
    if mode == "compile":
        r = precompile.save()
        report = {
            "entries": r.entries,
            "backends": r.backends,
            "missing_backends": r.missing_backends,
        }
    torch.save(outputs, out_path + ".pt")
    with open(out_path, "w") as f:
        json.dump({"counters": snapshot(), "models": per_model, "report": report}, f)


if __name__ == "__main__":
    main()
