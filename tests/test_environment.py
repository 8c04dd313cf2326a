"""The environment an entry is filed under: its canonical description, its id, and what a miss says differs."""

from __future__ import annotations

import dataclasses
import json

import pytest
from blake3 import blake3

from precompile import FormatError
from precompile.environment import Environment

HERE = Environment(
    python="cpython 3.11",
    torch="2.15.0",
    torch_git="d0f2af8b66b20da4baa50644c0cd3f887a2eae2e",
    triton="3.9.0",
    cpu="AVX512",
    accelerator=None,
)


def test_the_id_is_a_digest_of_the_canonical_description() -> None:
    doc = HERE.to_json()
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    assert HERE.canonical() == canonical
    assert HERE.id == blake3(canonical).hexdigest()[:16]
    assert Environment.from_json(json.loads(canonical)) == HERE
    assert dataclasses.replace(HERE, accelerator="cuda 9.0").id != HERE.id


@pytest.mark.parametrize(
    "doc",
    [
        None,
        [],
        {k: v for k, v in HERE.to_json().items() if k != "cpu"},
        {**HERE.to_json(), "extra": "x"},
        {**HERE.to_json(), "torch": None},
        {**HERE.to_json(), "triton": 3},
    ],
)
def test_a_malformed_description_is_a_format_error(doc: object) -> None:
    with pytest.raises(FormatError, match="environment"):
        Environment.from_json(doc)


def test_differences_name_each_factor_in_words() -> None:
    stored = dataclasses.replace(
        HERE, torch="2.11.0+cu128", torch_git="70d99e998b4955e0049d13a98d77ae1b14db1f45", triton=None
    )
    assert stored.differences(HERE) == [
        ("torch", "torch 2.11.0+cu128 stored, 2.15.0 here"),
        ("torch_git", "torch build 70d99e998b49 stored, d0f2af8b66b2 here"),
        ("triton", "Triton none stored, 3.9.0 here"),
    ]
    assert HERE.differences(HERE) == []


@pytest.mark.torch
def test_entry_ref_names_parse() -> None:
    from precompile.entries import parse_ref

    assert parse_ref("dynamo/0123456789abcdef/k") == ("0123456789abcdef", "k")
    assert parse_ref("dynamo/k") == (None, "k")
    assert parse_ref("host/torch_key/x") is None and parse_ref("dynamo/a/b/c") is None
