"""Placing stored kernel files where torch's loaders look."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from precompile import kernels


@pytest.mark.parametrize(
    "bad",
    ["../evil.so", "/etc/evil.so", "ab/../../evil.so", "ab/cd/evil.so", "ab/evil.py", "a/evil.so", "ab/.so", ""],
)
def test_library_paths_outside_the_cache_dir_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="refusing"):
        kernels.validate_library_path(bad)


def test_library_is_placed_once(tmp_path: Path) -> None:
    rel = "ab/cabcdef.main.so"
    assert kernels.place_library(str(tmp_path), rel, b"\x7fELF first")
    assert not kernels.place_library(str(tmp_path), rel, b"\x7fELF second")
    assert (tmp_path / rel).read_bytes() == b"\x7fELF first"
    assert not [p for p in (tmp_path / "ab").iterdir() if p.name.endswith(".tmp")]


def test_library_relpath_only_inside_cache_dir(tmp_path: Path) -> None:
    assert kernels.library_relpath(str(tmp_path / "xy" / "cxy.so"), str(tmp_path)) == "xy/cxy.so"
    assert kernels.library_relpath("/usr/lib/libc.so", str(tmp_path)) is None


def test_group_file_keeps_only_what_launching_reads() -> None:
    group = {
        "child_paths": {
            "k.cubin": "[REPLACE]/k.cubin",
            "k.json": "[REPLACE]/k.json",
            "k.ttir": "[REPLACE]/k.ttir",
            "k.ttgir": "[REPLACE]/k.ttgir",
            "k.llir": "[REPLACE]/k.llir",
            "k.ptx": "[REPLACE]/k.ptx",
        }
    }
    trimmed = json.loads(kernels.trim_group_file(json.dumps(group).encode()))
    assert sorted(trimmed["child_paths"]) == ["k.cubin", "k.json"]
    assert all(kernels.is_load_file(n) for n in trimmed["child_paths"])
    assert not kernels.is_load_file("k.ptx")
