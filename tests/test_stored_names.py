"""Stored guard states name the store's rebuild functions by module path (docs/FORMAT.md):
`precompile._torch.stored.<name>`, and `precompile._torch_compat.<name>` in entries written
before the adapter was a package. Both keep unpickling."""

from __future__ import annotations

import pickle
import pickletools

import pytest

pytestmark = pytest.mark.torch

# The names entries written before the adapter was a package may hold.
NAMES = ("_import_checked", "_import_script_function", "_rebuild_dict_subclass", "_rebuild_guarded_function")
# Every rebuild function a guard state names.
STORED = (
    *NAMES,
    "_import_custom_op",
    "_new_generator",
    "_rebuild_dim_marked",
    "_rebuild_optimizer",
    "_rebuild_parametrized_module",
    "_resolve_local_class",
    "_new_instance",
    "_set_module_state",
)


def _globals(data: bytes) -> set[str]:
    found = set()
    strings: list[str] = []
    for op, arg, _ in pickletools.genops(data):
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(arg)
        elif op.name == "STACK_GLOBAL":
            found.add(".".join(strings[-2:]))
        elif op.name == "GLOBAL":
            found.add(arg.replace(" ", "."))
    return found


@pytest.mark.parametrize("name", STORED)
def test_a_rebuild_function_pickles_under_its_stored_path(name: str) -> None:
    from precompile._torch import stored

    fn = getattr(stored, name)
    data = pickle.dumps(fn, protocol=4)
    assert _globals(data) == {f"precompile._torch.stored.{name}"}
    assert pickle.loads(data) is fn


@pytest.mark.parametrize("name", NAMES)
def test_the_earlier_path_names_the_same_function(name: str) -> None:
    from precompile import _torch_compat
    from precompile._torch import stored

    assert getattr(_torch_compat, name) is getattr(stored, name)


def test_a_state_written_before_the_adapter_was_a_package_loads() -> None:
    from precompile._torch import stored

    # Protocol 0 text, as an entry written by an earlier release names it.
    old = b"cprecompile._torch_compat\n_rebuild_dict_subclass\np0\n."
    assert pickle.loads(old) is stored._rebuild_dict_subclass
