"""What a save writes: manifests that validate, entries that name their function.

Every manifest a save writes parses and lists exactly what its record
names; an entry's metadata, `precompile ls` and `precompile show` name the
compiled function and its file; an entry that cannot install is a miss,
counted, warned once and recorded for `precompile explain`.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import torch
from support import torch_contract
from support.torch_contract import functions, reset
from torch._dynamo.precompile_context import PrecompileContext
from torch._dynamo.utils import counters

import precompile
from precompile.entries import REF_PREFIX
from precompile.miss_log import read_records, summary_lines
from precompile.schema import EntryMeta, parse_meta

pytestmark = pytest.mark.torch


def test_every_manifest_a_save_writes_validates(store: Path) -> None:
    _sin_cos, _cos_plus, _with_break = functions()
    torch.compile(_with_break)(torch.randn(4, 4))
    torch.compile(_sin_cos)(torch.randn(3, 2))
    PrecompileContext.save_to_dynamo_cache()
    s = precompile.Store(str(store))
    seen: set[str] = set()
    pending = [s.get_ref(name) for name in s.refs(REF_PREFIX)]
    kinds = set()
    while pending:
        digest = pending.pop()
        if digest in seen:
            continue
        seen.add(digest)
        blob = bytes(s.get(digest))
        if not blob.startswith(b"precompile-manifest\n"):
            continue
        children, meta = s.get_manifest(digest)
        record = parse_meta(meta)
        assert record is not None, meta
        kinds.add(record.KIND)
        # What the record names is exactly what the manifest lists.
        assert sorted(set(record.children())) == sorted(children)
        assert type(record).from_json(record.to_json()) == record
        pending += children
    assert {"precompile/entry", "precompile/aot-backend", "precompile/fx-graph"} <= kinds


def test_entry_metadata_names_the_function(store: Path) -> None:
    _sin_cos, _cos_plus, _with_break = functions()
    torch.compile(_sin_cos)(torch.randn(3, 2))
    PrecompileContext.save_to_dynamo_cache()
    s = precompile.Store(str(store))
    (name,) = s.refs(REF_PREFIX)
    _, meta = s.get_manifest(s.get_ref(name))
    entry = EntryMeta.from_json(meta)
    assert entry.source.qualname == "functions.<locals>.sin_cos"
    assert entry.source.file == torch_contract.__file__
    assert entry.source.line == _sin_cos.__code__.co_firstlineno
    assert entry.device_type == "cpu"
    assert entry.torch == torch.__version__


def test_an_entry_that_cannot_install_is_a_miss_with_a_warning(store: Path) -> None:
    _sin_cos, _cos_plus, _with_break = functions()
    x = torch.randn(3, 2)
    torch.compile(_sin_cos)(x)
    PrecompileContext.save_to_dynamo_cache()
    reset()
    # Damage what the loaded package installs: its guards state no longer
    # unpickles, as when a stored entry names something this process lacks.
    original = precompile.StoreDynamoCache.load

    def damaged(self: precompile.StoreDynamoCache, fn: object) -> object:
        entry = original(self, fn)
        for code in entry.dynamo.codes:
            for guarded in code.guarded_codes:
                guarded.guards_state = b"\x80\x05not a pickle"
        return entry

    precompile.StoreDynamoCache.load = damaged  # type: ignore[method-assign]
    precompile.install(store, save_on_exit=False)

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = torch.compile(_sin_cos)(x)
    finally:
        precompile.StoreDynamoCache.load = original  # type: ignore[method-assign]
    torch.testing.assert_close(out, _sin_cos(x))
    assert counters["precompile"]["install_failed"] == 1
    assert counters["precompile"]["miss_install_failed"] == 1
    # Nothing of the entry runs, so nothing of it counts as loaded.
    assert counters["precompile"]["frames_loaded"] == 0
    assert counters["precompile"]["entries_loaded"] == 0
    # The process's one miss warning names the function and torch's error.
    installs = [str(w.message) for w in caught if issubclass(w.category, precompile.PrecompileWarning)]
    assert len(installs) == 1, installs
    assert installs[0].startswith("precompile miss (install_failed) for functions.<locals>.sin_cos (sin_cos) at "), (
        installs
    )
    assert "(key " in installs[0] and "): UnpicklingError: invalid load key, 'n'.; compiling instead." in installs[0]
    # `precompile explain` reads the same miss back, and does not count the
    # entry as loaded.
    records = read_records(str(store))
    [failed] = [r for r in records if r.get("event") == "miss"]
    assert failed["reason"] == "install_failed"
    assert failed["frame"] == "functions.<locals>.sin_cos (sin_cos)"
    assert "UnpicklingError" in failed["detail"]
    assert summary_lines(records)[-1] == "entries loaded: 0 (0 compiled variants); misses: 1 install_failed"


def test_ls_and_show_name_the_function(store: Path) -> None:
    import json
    import os
    import subprocess

    _sin_cos, _cos_plus, _with_break = functions()
    torch.compile(_sin_cos)(torch.randn(3, 2))
    PrecompileContext.save_to_dynamo_cache()
    cli = [sys.executable, "-m", "precompile", "--store", str(store)]
    listed = json.loads(subprocess.run([*cli, "ls", "--json"], capture_output=True, check=True).stdout)
    (ref,) = listed
    assert ref["entry"]["function"] == "functions.<locals>.sin_cos"
    assert ref["entry"]["file"] == torch_contract.__file__
    assert ref["entry"]["device"] == "cpu"
    wide = {**os.environ, "COLUMNS": "300"}
    table = subprocess.run([*cli, "ls"], capture_output=True, text=True, check=True, env=wide).stdout
    assert "sin_cos" in table and "torch_contract.py:" in table
    shown = subprocess.run([*cli, "show", ref["name"]], capture_output=True, text=True, check=True, env=wide).stdout
    assert "functions.<locals>.sin_cos" in shown and f"torch {torch.__version__}" in shown
