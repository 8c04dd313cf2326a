"""Paths from a module to what torch's package cannot name."""

from __future__ import annotations

import collections
import dataclasses
import sys
import types

import pytest

from precompile import object_paths


@dataclasses.dataclass
class _Point:
    x: int
    y: int = 0

    @dataclasses.dataclass
    class Inner:
        z: int


exec("def _made_here(a):\n    return a + 1\n", globals())


def test_a_dataclass_init_is_named_through_its_class() -> None:
    module = __name__
    assert object_paths.owner_path(_Point.__init__.__code__) == (module, "_Point.__init__")
    assert object_paths.owner_path(_Point.Inner.__init__.__code__) == (module, "_Point.Inner.__init__")


def test_a_function_exec_bound_in_a_module_is_named_by_its_name() -> None:
    assert object_paths.owner_path(_made_here.__code__) == (__name__, "_made_here")  # noqa: F821


def test_code_nothing_reaches_has_no_path() -> None:
    namespace: dict = {"__name__": "not_a_module_here"}
    exec("def f():\n    return 1\n", namespace)
    assert object_paths.owner_path(namespace["f"].__code__) is None
    # A module's namespace, but bound under no name in it.
    local: dict = {}
    exec("def g():\n    return 2\n", globals(), local)
    assert object_paths.owner_path(local["g"].__code__) is None
    # A code from a source file is torch's to name.
    assert object_paths.owner_path(test_code_nothing_reaches_has_no_path.__code__) is None


def test_a_class_holding_another_function_under_the_name_is_not_a_path() -> None:
    @dataclasses.dataclass
    class Local:
        a: int

    # Defined in a function: no path from the module reaches the class.
    assert object_paths.owner_path(Local.__init__.__code__) is None


@pytest.mark.parametrize(
    ("value", "path"),
    [(iter, "builtins:iter"), (range, "builtins:range"), (collections.deque, "collections:deque"), (_Point, None)],
)
def test_object_paths_round_trip(value: object, path: str | None) -> None:
    expected = path if path is not None else f"{__name__}:_Point"
    assert object_paths.object_path(value) == expected
    assert object_paths.resolve(expected) is value


def test_objects_without_a_path() -> None:
    assert object_paths.object_path(lambda: 1) is None
    assert object_paths.object_path(object()) is None
    assert object_paths.object_path(types.SimpleNamespace(__module__="builtins", __qualname__="iter")) is None
    assert object_paths.resolve("no_such_module_anywhere:thing") is None
    assert object_paths.resolve("builtins:no_such_name") is None
    assert object_paths.resolve("builtins") is None
    assert object_paths.resolve(":iter") is None
    assert "no_such_module_anywhere" not in sys.modules
