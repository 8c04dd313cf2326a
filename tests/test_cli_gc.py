"""`precompile gc --max-size`: only deletions that free bytes, and a cap it cannot meet is an error."""

from __future__ import annotations

import json
from pathlib import Path

from support.processes import run_precompile
from support.synthetic import make_entries

from precompile import Store


def test_a_cap_the_grace_period_prevents_evicts_nothing_and_fails(tmp_path: Path) -> None:
    root = tmp_path / "store"
    refs = make_entries(Store(root), 3)
    before = Store(root).stats().bytes
    # Everything was written just now: the default grace (1h) keeps every object.
    proc = run_precompile("--store", root, "gc", "--max-size", "1K")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "evicted 0" in proc.stdout and "grace" in proc.stderr
    assert Store(root).refs() == sorted(refs)  # no entry lost for nothing
    assert Store(root).stats().bytes == before

    doc = run_precompile("--store", root, "gc", "--max-size", "1K", "--json")
    assert doc.returncode == 1
    report = json.loads(doc.stdout)
    assert report["refs_evicted"] == [] and report["target_met"] is False

    # Without the grace period the same cap is met by deleting entries.
    done = run_precompile("--store", root, "gc", "--max-size", "1K", "--grace", "0", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["target_met"] is True and Store(root).refs() == []
