"""Methods decorated with `@torch.compile` in their class body warm-start a fresh host.

torch looks a wrapper's entry up when it wraps the function, which for such a
method is while its class body runs: the stored guards name the class, which
is not bound yet, so the lookup failed (`guards_unreadable`) and the method
compiled on every start. The lookup now waits for the method's first call.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.counters import counter, miss_counters
from support.warm_start import assert_same_outputs, run_scenario

pytestmark = pytest.mark.torch

PROGRAM = Path(__file__).resolve().parent / "programs" / "class_body.py"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    work = tmp_path_factory.mktemp("class-body")
    a = run_scenario("decorated", "compile", work / "store", work, program=PROGRAM)
    return work / "store", a


def test_both_methods_load_on_their_first_call(compiled: tuple[Path, dict], tmp_path: Path) -> None:
    store, a = compiled
    assert a["graphs"] == 2, a["counters"]
    assert len(a["report"]) == 2, a["report"]  # the plain lineage and the dynamic one
    b = run_scenario("decorated", "load", store, tmp_path, program=PROGRAM)
    assert_same_outputs(a["outputs"], b["outputs"])
    assert counter(b, "dynamo_cache", "dynamo_cache_hit") == 2, b["counters"]
    assert miss_counters(b) == {}, b["counters"]
    assert b["graphs"] == 0, b["counters"]
    assert b["compiler_runs"] == [], b["compiler_runs"]


def test_without_the_patch_the_lookup_fails_while_the_class_body_runs(
    compiled: tuple[Path, dict], tmp_path: Path
) -> None:
    """What torch does alone: the wrap-time lookup of `forward`, whose guards
    name the class (through `self`), cannot read them; `scale`'s guards do not,
    so it loads either way."""
    store, _ = compiled
    b = run_scenario(
        "decorated",
        "load",
        store,
        tmp_path,
        program=PROGRAM,
        extra_env={"PRECOMPILE_PATCHES_OFF": "class_body_methods"},
    )
    assert counter(b, "precompile", "miss_guards_unreadable") == 1, b["counters"]
    assert b["graphs"] == 1, b["counters"]
