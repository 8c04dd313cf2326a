"""The report classes: read-only attributes, and to_dict() giving the same values as plain JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from precompile import Store, open_bundle


def _check(report: Any) -> dict[str, Any]:
    doc = report.to_dict()
    assert type(doc) is dict
    for key, value in doc.items():
        attr = getattr(report, key)
        if key == "refs" and isinstance(value, list):  # Usage.refs: RefUsage objects
            assert [r.to_dict() for r in attr] == value
        else:
            assert attr == value
    with pytest.raises(AttributeError):
        setattr(report, next(iter(doc)), 0)
    json.dumps(doc)
    assert repr(report).startswith(type(report).__name__ + "(")
    return doc


def test_every_report_is_a_frozen_class_with_a_plain_dict(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    leaf = store.put(b"leaf")
    manifest = store.put_manifest([leaf], {"name": "entry"})
    store.set_ref("entry", manifest)
    path = tmp_path / "b.bundle"

    assert _check(store.gc(grace_seconds=0)) == {
        "objects_freed": 0,
        "bytes_freed": 0,
        "objects_kept": 2,
        "tmp_freed": 0,
        "dry_run": False,
    }
    assert set(_check(store.evict(1 << 30, dry_run=True))) >= {"refs_evicted", "bytes_before", "objects_freed"}
    assert _check(store.verify())["ok"] is True
    assert _check(store.stats())["refs"] == 1
    usage = _check(store.usage())
    assert [r["name"] for r in usage["refs"]] == ["entry"]
    assert _check(store.export_bundle(None, path)) == {"blobs": 2, "refs": 1, "bytes": path.stat().st_size}
    assert _check(Store(tmp_path / "d").import_bundle(path, allow_unsigned=True))["objects_new"] == 2
    bundle = open_bundle(path)
    blob_bytes = len(b"leaf") + len(bytes(store.get(manifest)))
    assert _check(bundle.verify()) == {"blobs": 2, "bytes": blob_bytes, "corrupt": [], "ok": True}
    assert _check(bundle.stats())["blobs"] == 2
