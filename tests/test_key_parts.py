"""The parts of a function's key that entries record, and how a miss compares them (torch-free)."""

from __future__ import annotations

import pytest

from precompile.environment import Environment
from precompile.key_parts import KeyParts, code_digest, index_ref
from precompile.schema import EntryMeta, FnIndexMeta, FormatError, PickledRef, SourceLocation, parse_meta

SOURCE = "def f(x):\n    y = [v * 2 for v in x]\n    return sum(y) + len({'a', 'b'}) + (lambda z: z)(1)\n"
ENV = Environment(python="cpython 3.11", torch="2.15.0", torch_git=None, triton=None, cpu="AVX2", accelerator=None)


def _code(text: str, filename: str = "/src/model.py"):
    namespace: dict[str, object] = {}
    exec(compile(text, filename, "exec"), namespace)
    return namespace["f"].__code__  # type: ignore[attr-defined]


def test_the_code_digest_ignores_where_the_code_is_and_sees_an_edit() -> None:
    here = code_digest(_code(SOURCE))
    assert here is not None
    # Moved down its file, or to another checkout: the nested codes (a
    # comprehension, a lambda) move too, and the digest stays.
    assert code_digest(_code("\n\n\n" + SOURCE)) == here
    assert code_digest(_code(SOURCE, "/elsewhere/model.py")) == here
    assert code_digest(_code(SOURCE.replace("v * 2", "v * 3"))) != here
    assert code_digest(_code(SOURCE.replace("(1)", "(2)"))) != here
    assert code_digest(object()) is None


def test_differences_name_each_part_that_both_sides_know() -> None:
    stored = KeyParts("model", "f", "/a/model.py", 4, "c1")
    assert stored.differences(stored) == []
    moved = KeyParts("model", "f", "/b/model.py", 6, "c1")
    assert [f for f, _ in stored.differences(moved)] == ["line", "file"]
    edited = KeyParts("model", "f", "/a/model.py", 4, "c2")
    assert stored.differences(edited) == [
        ("source", "stored entry compiled from other source (the function's code differs)")
    ]
    unknown = KeyParts("model", "f", None, None, None)
    assert stored.differences(unknown) == []


def test_the_index_ref_names_the_function_by_module_and_qualname() -> None:
    a = index_ref(KeyParts("model", "Net.forward", "/a/model.py", 4, "c1"))
    assert a is not None and a.startswith("host/fn/") and len(a) == len("host/fn/") + 32
    assert a == index_ref(KeyParts("model", "Net.forward", "/b/model.py", 9, "c2"))
    assert a != index_ref(KeyParts("other", "Net.forward", "/a/model.py", 4, "c1"))
    assert index_ref(KeyParts(None, "f", None, None, None)) is None


def _entry(**changes: object) -> EntryMeta:
    fields: dict[str, object] = {
        "key": "k",
        "torch": "2.15.0",
        "triton": None,
        "device_type": "cpu",
        "source": SourceLocation("f", "/a/model.py", 4),
        "dynamo": PickledRef("0" * 64),
        "backends": {},
        "env": ENV,
        **changes,
    }
    return EntryMeta(**fields)  # type: ignore[arg-type]


def test_entries_carry_their_key_parts_and_format_3_entries_still_read() -> None:
    meta = _entry(key_parts=KeyParts("model", "f", "/a/model.py", 4, "c1"))
    doc = meta.to_json()
    assert doc["format"] == 4 and EntryMeta.from_json(doc) == meta
    older = {k: v for k, v in doc.items() if k != "key_parts"}
    assert EntryMeta.from_json({**older, "format": 3}) == _entry()
    with pytest.raises(FormatError, match="format 2"):
        EntryMeta.from_json({**older, "format": 2})
    for bad in ("model", {"line": "4"}, {"code": 5}, {"line": True}):
        with pytest.raises(FormatError, match="key_parts"):
            EntryMeta.from_json({**doc, "key_parts": bad})


def test_the_function_index_is_a_record_that_names_nothing() -> None:
    index = FnIndexMeta("dynamo/0123456789abcdef/k", KeyParts("model", "f", "/a/model.py", 4, "c1"), ENV, "cpu")
    assert index.children() == []
    assert parse_meta(index.to_json()) == index
    with pytest.raises(FormatError):
        FnIndexMeta.from_json({**index.to_json(), "ref": 3})
