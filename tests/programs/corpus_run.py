"""One side of the corpus warm-start test, run as a subprocess.

    python corpus_run.py MODELS compile|load STORE OUT_JSON

Installs precompile over STORE, runs each corpus model (comma-separated
MODELS) in turn, saves on `compile`, and writes the outputs plus each model's
counter deltas, so a failure names the model that recompiled. A model whose
call raises is recorded with its error, and the next model runs.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch

import precompile

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benches"))
import corpus


def _snapshot() -> dict[str, dict[str, int]]:
    from torch._dynamo.utils import counters

    return {k: dict(v) for k, v in counters.items()}


def _delta(before: dict, after: dict) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for group, values in after.items():
        for name, value in values.items():
            d = value - before.get(group, {}).get(name, 0)
            if d:
                out.setdefault(group, {})[name] = d
    return out


def _log_lines() -> int:
    # The parent's compiler spy log (PRECOMPILE_TEST_COMPILER_LOG), so each
    # model's compiler calls can be told apart.
    path = os.environ.get("PRECOMPILE_TEST_COMPILER_LOG")
    if not path or not os.path.exists(path):
        return 0
    with open(path) as f:
        return sum(1 for _ in f)


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
        before = _snapshot()
        first_line = _log_lines()
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
            "compiler_log_lines": [first_line, _log_lines()],
            "seconds": time.perf_counter() - start,
            "outputs": [len(outputs), len(outputs) + len(result)],
            "counters": _delta(before, _snapshot()),
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
        json.dump({"counters": _snapshot(), "models": per_model, "report": report}, f)


if __name__ == "__main__":
    main()
