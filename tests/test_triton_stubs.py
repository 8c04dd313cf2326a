"""Triton's C stub libraries travel with an entry: an empty Triton cache
gets them back under the same names, and Triton then builds nothing."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from support.warm_start import compiler_runs, compiler_spy

import precompile
from precompile import triton_stubs

pytestmark = pytest.mark.torch
pytest.importorskip("triton")
from triton.runtime.build import compile_module_from_src  # noqa: E402

# A C extension module built the way Triton builds its driver stub.
_SOURCE = """
#define PY_SSIZE_T_CLEAN
#include <Python.h>
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "%s", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_%s(void) { return PyModule_Create(&module); }
"""


def _spied_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: Path) -> Path:
    log = tmp_path / f"{cache.name}.log"
    env = {"CC": os.environ.get("CC") or "gcc"}
    compiler_spy(tmp_path / f"{cache.name}-bin", log, env)
    monkeypatch.setenv("CC", env["CC"])
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    return log


def test_stub_built_in_one_cache_is_placed_into_an_empty_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"precompile_stub_{os.getpid()}"
    source = _SOURCE % (name, name)
    first = _spied_compiler(tmp_path, monkeypatch, tmp_path / "first")
    compile_module_from_src(source, name)
    assert len(compiler_runs(first)) == 1
    store = precompile.Store(str(tmp_path / "store"))
    stubs = triton_stubs.put_stubs(store)
    ours = [s for s in stubs if s[1].startswith(name)]
    assert len(ours) == 1, stubs
    directory, filename, digest = ours[0]
    assert (tmp_path / "first" / directory / filename).is_file()

    second = _spied_compiler(tmp_path, monkeypatch, tmp_path / "second")
    assert triton_stubs.place([(directory, filename, store.get(digest))]) == 1
    assert (tmp_path / "second" / directory / filename).read_bytes() == bytes(store.get(digest))
    # Placed again: already there, nothing written.
    assert triton_stubs.place([(directory, filename, store.get(digest))]) == 0
    sys.modules.pop(name, None)
    module = compile_module_from_src(source, name)
    assert module.__name__ == name
    assert compiler_runs(second) == [], "Triton rebuilt a stub the store had placed"


@pytest.mark.parametrize(
    "directory,filename",
    [
        ("../../etc", "x.so"),
        ("A" * 52, "../x.so"),
        ("A" * 52, "x.py"),
        ("a/b", "x.so"),
        ("", "x.so"),
        ("A" * 52, ".hidden/x.so"),
    ],
)
def test_hostile_stub_names_are_refused(directory: str, filename: str) -> None:
    with pytest.raises(ValueError):
        triton_stubs.validate(directory, filename)
