"""`precompile stats`: hits, misses and saves summed across processes, and sizes defined once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.processes import child_env, run_precompile
from support.synthetic import make_entries

from precompile import Store
from precompile.run_stats import RunStats, read_totals

_WRITER = """
import sys
from precompile.run_stats import RunStats
stats = RunStats()
stats.begin(sys.argv[1])
for _ in range(int(sys.argv[2])):
    stats.add("hits")
    stats.add("miss_not_stored", 2)
    stats.flush()
"""

_FOLDER = """
import sys
from precompile.run_stats import read_totals
for _ in range(int(sys.argv[2])):
    read_totals(sys.argv[1])
"""


def _stats(root: Path) -> dict[str, object]:
    proc = run_precompile("--store", root, "stats", "--json")
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, object] = json.loads(proc.stdout)
    return doc


def test_concurrent_processes_lose_no_counts(tmp_path: Path) -> None:
    root = tmp_path / "store"
    Store(root)
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(root), "40"], env=child_env()) for _ in range(4)]
    # Folds run while the writers write: a count is neither lost nor summed twice.
    folders = [subprocess.Popen([sys.executable, "-c", _FOLDER, str(root), "40"], env=child_env()) for _ in range(2)]
    assert all(p.wait(timeout=300) == 0 for p in writers + folders)
    totals, _ = read_totals(root)
    assert totals == {"hits": 160, "miss_not_stored": 320}
    assert [p.name for p in (root / "stats").iterdir() if p.suffix == ".json"] == ["total.json"]


def test_a_killed_process_keeps_what_it_flushed(tmp_path: Path) -> None:
    root = tmp_path / "store"
    Store(root)
    code = _WRITER + "import os, signal\nstats.add('hits', 1000)\nos.kill(os.getpid(), signal.SIGKILL)\n"
    proc = subprocess.run([sys.executable, "-c", code, str(root), "3"], env=child_env(), timeout=120)
    assert proc.returncode == -9
    assert read_totals(root)[0] == {"hits": 3, "miss_not_stored": 6}


def test_stats_reports_location_sizes_and_counts_then_zero(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = Store(root)
    make_entries(store, 3)
    # A host-local ref (memoized install hashes) is no entry.
    store.set_ref("host/torch-hash", store.put(b"host"))
    counted = RunStats()
    counted.begin(root)
    counted.add("hits", 3)
    counted.add("miss_source_changed")
    counted.add("miss_load_error")
    counted.add("saves", 2)
    counted.flush()

    doc = _stats(root)
    assert doc["store"] == str(root.resolve()) and doc["entries"] == 3
    assert doc["hits"] == 3 and doc["misses"] == 2 and doc["saves"] == 2 and doc["load_errors"] == 1
    assert doc["misses_by_reason"] == {"load_error": 1, "source_changed": 1}
    assert doc["hit_rate"] == pytest.approx(0.6)
    assert doc["referenced_bytes"] + doc["reclaimable_bytes"] == doc["stored_bytes"]
    text = run_precompile("--store", root, "stats").stdout
    assert str(root.resolve()) in " ".join(text.split()) and "60.0%" in text and "source_changed" in text

    assert run_precompile("--store", root, "stats", "--zero").returncode == 0
    zeroed = _stats(root)
    assert (zeroed["hits"], zeroed["misses"], zeroed["saves"], zeroed["hit_rate"]) == (0, 0, 0, None)


def test_du_shares_add_up_to_the_store(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = Store(root)
    make_entries(store, 3)
    store.put(b"unreferenced")
    proc = run_precompile("--store", root, "du", "--json")
    du = json.loads(proc.stdout)
    parts = sum(r["unique_bytes"] for r in du["refs"]) + du["shared_bytes"] + du["reclaimable_bytes"]
    assert parts == du["stored_bytes"] and du["shared_bytes"] > 0
    stats = _stats(root)
    assert {k: stats[k] for k in ("stored_bytes", "referenced_bytes", "reclaimable_bytes", "shared_bytes")} == {
        k: du[k] for k in ("stored_bytes", "referenced_bytes", "reclaimable_bytes", "shared_bytes")
    }
    text = run_precompile("--store", root, "du").stdout
    shares = [float(w[:-1]) for w in text.split() if w.endswith("%")]
    assert sum(shares[:-1]) == pytest.approx(100.0, abs=0.1 * len(shares)) and shares[-1] == 100.0
