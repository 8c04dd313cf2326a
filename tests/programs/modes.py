"""One side of the compile-modes warm-start test, run as a subprocess.

    python modes.py DEVICE:CASE,CASE,... compile|load STORE OUT_JSON

Installs precompile over STORE, then imports benches/mode_cases.py (one of its
cases applies `@torch.compile` at import) and runs each case in turn; saves on
`compile`. Writes the outputs (OUT_JSON.pt), the counters and each case's
counter deltas and compiler-log lines (OUT_JSON), as corpus_run.py does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from counts import delta, log_lines, snapshot

import precompile

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benches"))


# Autotuning benchmarks run in this process, counted where they start. Inductor's
# own counters cannot tell: a graph loaded from a cache replays the counters its
# compile recorded (`select_algorithm_autotune` among them).
_benchmarks = [0]


def _count_benchmarks() -> None:
    from torch._inductor.select_algorithm import AlgorithmSelectorCache

    benchmark = AlgorithmSelectorCache.benchmark

    def counted(self: object, *args: object, **kwargs: object) -> object:
        _benchmarks[0] += 1
        return benchmark(self, *args, **kwargs)

    AlgorithmSelectorCache.benchmark = counted  # type: ignore[method-assign]


def main() -> None:
    spec, mode, store, out_path = sys.argv[1:5]
    device, names = spec.split(":")
    precompile.install(store, save_on_exit=False)
    _count_benchmarks()
    import mode_cases

    outputs: list[torch.Tensor] = []
    per_case: dict[str, dict] = {}
    for name in names.split(","):
        before, first_line, benchmarks = snapshot(), log_lines(), _benchmarks[0]
        result = mode_cases.CASES[name](device)
        per_case[name] = {
            "compiler_log_lines": [first_line, log_lines()],
            "outputs": [len(outputs), len(outputs) + len(result)],
            "counters": delta(before, snapshot()),
            "benchmarks": _benchmarks[0] - benchmarks,
        }
        outputs += [o.detach().cpu() for o in result]
    report = None
    if mode == "compile":
        r = precompile.save()
        report = {"entries": r.entries, "backends": r.backends, "missing_backends": r.missing_backends}
    torch.save(outputs, out_path + ".pt")
    with open(out_path, "w") as f:
        json.dump({"counters": snapshot(), "cases": per_case, "report": report}, f)


if __name__ == "__main__":
    main()
