"""Turning one torch patch off while the store stays installed, for tests/test_patches*.py.

Each patch of `precompile`'s torch adapter is a liability with a lifetime:
its test must fail with it off. This module holds the one import of the
adapter those tests use, and the switch that turns a single patch off.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from precompile import _torch as tc

__all__ = ["off", "require", "tc"]


def require(patch: Any) -> None:
    """Skip the calling test where `patch` is inactive: this torch needs no adaptation."""
    if not patch.active:
        pytest.skip(f"{type(patch).__name__} is inactive on torch {torch.__version__}: nothing to adapt")


@contextlib.contextmanager
def off(patch: Any) -> Iterator[None]:
    """`patch` stopped while the store stays installed, started again on the way out.

    Several patches wrap one attribute (`serialize_guards` four,
    `CompilePackage.install` two), each over what it found at start, and a
    stop puts back what that patch found: the patches started after `patch`
    are stopped first and started again without it, so they keep wrapping.
    """
    order = [p for _, p in tc.patches()]
    later = order[order.index(patch) :]
    for p in reversed(later):
        p.stop()
    for p in later[1:]:
        p.start()
    try:
        yield
    finally:
        for p in reversed(later[1:]):
            p.stop()
        for p in later:
            p.start()
