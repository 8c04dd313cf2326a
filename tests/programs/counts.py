"""Counter snapshots and the compiler spy's log, shared by the test programs
that run several models or cases in one process and report each one's share."""

from __future__ import annotations

import os


def snapshot() -> dict[str, dict[str, int]]:
    """torch's `counters`, copied."""
    from torch._dynamo.utils import counters

    return {k: dict(v) for k, v in counters.items()}


def delta(before: dict, after: dict) -> dict[str, dict[str, int]]:
    """The counters that moved between two snapshots, by how much."""
    out: dict[str, dict[str, int]] = {}
    for group, values in after.items():
        for name, value in values.items():
            d = value - before.get(group, {}).get(name, 0)
            if d:
                out.setdefault(group, {})[name] = d
    return out


def log_lines() -> int:
    """Lines in the parent's compiler spy log (PRECOMPILE_TEST_COMPILER_LOG), so
    each model's or case's compiler calls can be told apart."""
    path = os.environ.get("PRECOMPILE_TEST_COMPILER_LOG")
    if not path or not os.path.exists(path):
        return 0
    with open(path) as f:
        return sum(1 for _ in f)
