"""Frames torch would store with an identity guard dropped, or cannot store at all.

Under `caching_precompile` torch drops ID_MATCH and CLOSURE_MATCH guards:
a function calling a module-level lambda was stored without the check that
the lambda is the one it traced, and a process whose lambda differs was
served the stored code (a wrong result). Such a guard on an object no name
binds is now kept and the frame not stored: a later process compiles it and
computes with its own lambda. A class defined inside a function cannot be
named in another process: its frame is not stored either, a `bypassed` miss,
unless a module-level name reaches it (it holds the class or an instance),
where it is stored by that name and checked by its code on load.
An identity test on an instance (`CHOICE is MARK`) is stored with guards
that reject another instance. A global holding a named function, builtin or
class is stored with its guard, rebuilt against the loading process's object
of that name, so a global that holds another object there is refused. Each later process
computes what eager does.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.counters import counter
from support.warm_start import run_scenario

pytestmark = pytest.mark.torch

PROGRAM = Path(__file__).resolve().parent / "programs" / "bypasses.py"
OTHER = {"PRECOMPILE_TEST_OTHER": "1"}


def _round_trip(name: str, tmp_path: Path, env: dict[str, str] | None = None) -> tuple[dict, dict]:
    store = tmp_path / "store"
    a = run_scenario(name, "compile", store, tmp_path, program=PROGRAM)
    b = run_scenario(name, "load", store, tmp_path, extra_env=env, program=PROGRAM)
    for side in (a, b):
        out, expected = side["outputs"]
        torch.testing.assert_close(out, expected)
    return a, b


def test_a_global_lambda_is_guarded_and_its_frame_not_stored(tmp_path: Path) -> None:
    a, b = _round_trip("lambda", tmp_path, OTHER)
    assert "CLOSURE_MATCH guard on G['ACT']" in a["stderr"], a["stderr"][-3000:]
    assert counter(b, "precompile", "frames_loaded") == 0, b["counters"]
    assert counter(b, "precompile", "miss_bypassed") == 1, b["counters"]


def test_a_local_class_is_a_bypassed_miss(tmp_path: Path) -> None:
    a, b = _round_trip("local_class", tmp_path)
    assert "defined in local scope" in a["stderr"], a["stderr"][-3000:]
    assert counter(b, "precompile", "miss_bypassed") == 1, b["counters"]
    assert counter(b, "stats", "unique_graphs") == 1, b["counters"]


def test_a_local_class_a_module_name_reaches_is_stored(tmp_path: Path) -> None:
    """The `kernels` package's shape: a module calls its private instance of
    a class made inside a function, whose instance a module-level name
    holds. torch bypasses the frame; the store saves the class by that name."""
    a, b = _round_trip("bound_local_class", tmp_path)
    assert "package bypass" not in a["stderr"], a["stderr"][-3000:]
    assert counter(b, "precompile", "frames_loaded") == 1, b["counters"]
    assert counter(b, "stats", "unique_graphs") == 0, b["counters"]


def test_a_local_class_made_by_other_code_is_refused(tmp_path: Path) -> None:
    """The loading process's class has the same module, name and qualified
    name but other code: the entry does not serve it, and the frame compiles
    to what eager computes (x * 4, not the stored x * 3)."""
    _, b = _round_trip("bound_local_class", tmp_path, OTHER)
    assert counter(b, "precompile", "miss_guards_unreadable") == 1, b["counters"]
    assert counter(b, "precompile", "frames_loaded") == 0, b["counters"]
    assert counter(b, "stats", "unique_graphs") == 1, b["counters"]


def test_an_instance_of_a_nested_class_is_stored(tmp_path: Path) -> None:
    """`Outer.Inner` imports by name: torch bypasses a type guard on its
    instance all the same (its qualified name is not its name)."""
    a, b = _round_trip("nested_class", tmp_path)
    assert "package bypass" not in a["stderr"], a["stderr"][-3000:]
    assert counter(b, "precompile", "frames_loaded") == 1, b["counters"]
    assert counter(b, "stats", "unique_graphs") == 0, b["counters"]


def test_the_class_of_a_named_function_is_no_bypass(tmp_path: Path) -> None:
    """Reading a module-level function's class (torchvision's detection heads
    log each op they call) guards `G['f'].__class__`: the interpreter's
    `function` type, the same object in any process, not an instance only
    this process holds."""
    a, b = _round_trip("function_class", tmp_path)
    assert "package bypass" not in a["stderr"], a["stderr"][-3000:]
    assert counter(b, "precompile", "frames_loaded") == 1, b["counters"]
    assert counter(b, "stats", "unique_graphs") == 0, b["counters"]


def test_an_identity_test_on_an_instance_rejects_another_instance(tmp_path: Path) -> None:
    a, b = _round_trip("identity", tmp_path, OTHER)
    assert counter(b, "precompile", "frames_loaded") == 1, b["counters"]
    assert counter(b, "precompile", "miss_guard_failed") == 1, b["counters"]


def test_an_enum_member_read_by_its_name_is_stored(tmp_path: Path) -> None:
    """`action is Action.NONE` guards the member through its own name
    (`G['Action'].NONE`): one object per class and name in any process, so
    the frame is stored and loads."""
    a, b = _round_trip("enum_member", tmp_path)
    assert "package bypass" not in a["stderr"], a["stderr"][-3000:]
    assert counter(b, "precompile", "frames_loaded") == 1, b["counters"]
    assert counter(b, "stats", "unique_graphs") == 0, b["counters"]


def test_another_enum_member_as_an_argument_is_refused(tmp_path: Path) -> None:
    """torch drops the identity guard on the argument (`L['action']`) under
    caching_precompile, in the compiling process too; kept and stored, it
    refuses a call with another member in the loading process, which
    compiles that branch and computes what eager computes."""
    a, b = _round_trip("enum_member", tmp_path, OTHER)
    assert "package bypass" not in a["stderr"], a["stderr"][-3000:]
    assert counter(b, "precompile", "frames_loaded") == 1, b["counters"]
    assert counter(b, "precompile", "miss_guard_failed") == 1, b["counters"]
    assert counter(b, "stats", "unique_graphs") == 1, b["counters"]


def test_a_global_holding_an_enum_member_is_stored_with_its_guard(tmp_path: Path) -> None:
    """`PICK is Action.NONE` on a global that another process binds to
    another member: the identity guard on `G['PICK']` is stored, and the
    process where `PICK` is `Action.SCALE` refuses the entry and compiles."""
    a, b = _round_trip("enum_global", tmp_path / "same")
    assert "package bypass" not in a["stderr"], a["stderr"][-3000:]
    assert counter(b, "precompile", "frames_loaded") == 1, b["counters"]
    assert counter(b, "stats", "unique_graphs") == 0, b["counters"]
    _, c = _round_trip("enum_global", tmp_path / "other", OTHER)
    assert counter(c, "precompile", "frames_loaded") == 1, c["counters"]
    assert counter(c, "precompile", "miss_guard_failed") == 1, c["counters"]
    assert counter(c, "stats", "unique_graphs") == 1, c["counters"]


@pytest.mark.parametrize("name", ["named_alias", "builtin_alias", "class_alias"])
def test_a_global_naming_another_object_is_refused(name: str, tmp_path: Path) -> None:
    """`NAMED_ACT = _relu` here, `_sigmoid` in the loading process (a
    conditional import does this; the same for a builtin, `torch.relu`, and
    a class): torch drops the identity guard on the global and serves the
    code traced through `_relu`, a wrong result. The store keeps the guard
    and saves the object by name; the loading process rebuilds it against
    its own `_relu`, refuses the entry and compiles. Where the global holds
    the same object, the entry loads."""
    a, b = _round_trip(name, tmp_path / "other", OTHER)
    assert "package bypass" not in a["stderr"], a["stderr"][-3000:]
    assert counter(b, "precompile", "frames_loaded") == 1, b["counters"]
    assert counter(b, "precompile", "miss_guard_failed") == 1, b["counters"]
    assert counter(b, "stats", "unique_graphs") == 1, b["counters"]
    _, c = _round_trip(name, tmp_path / "same")
    assert counter(c, "precompile", "frames_loaded") == 1, c["counters"]
    assert counter(c, "stats", "unique_graphs") == 0, c["counters"]


def test_a_cached_helper_is_stored(tmp_path: Path) -> None:
    """Dynamo traces through a `functools.lru_cache` function and guards the
    function it wraps (`G['_inverse_frequencies'].__wrapped__`), which its
    own module and name do not reach (they give the wrapper): the loading
    process's wrapper of that name holds its own."""
    a, b = _round_trip("cached_helper", tmp_path)
    assert "package bypass" not in a["stderr"], a["stderr"][-3000:]
    assert counter(b, "precompile", "frames_loaded") == 1, b["counters"]
    assert counter(b, "stats", "unique_graphs") == 0, b["counters"]
