"""Custom ops (`torch.library.custom_op`) as torch's registry names them: one op per qualified name in a process."""

from __future__ import annotations

from typing import Any

import torch


def registered_op(qualname: str) -> Any | None:
    """The custom op registered under `qualname` (`ns::name`) in this process, or None."""
    from torch._library import custom_ops

    opdefs = getattr(custom_ops, "OPDEFS", None)
    return opdefs.get(qualname) if opdefs is not None else None


def is_registered_op(value: object) -> bool:
    """Whether `value` is a custom op, the one registered under its own qualified name."""
    qualname = getattr(value, "_qualname", None)
    return isinstance(qualname, str) and registered_op(qualname) is value


def is_registered_operator(value: object) -> bool:
    """Whether `value` is the operator (`OpOverload`) of a registered custom op."""
    if not isinstance(value, torch._ops.OpOverload):
        return False
    op = registered_op(getattr(value, "_name", ""))
    return op is not None and getattr(op, "_opoverload", None) is value
