"""`torch.compile` of a callable without code of its own: a `functools.partial` or a callable instance."""

from __future__ import annotations

import functools
import inspect
import types
from typing import Any

import torch
from torch._dynamo import config as dynamo_config
from torch._dynamo import eval_frame

from .class_body import install_loaded
from .patch import _Patch

# Partials wrapping partials: how deep the walk to the function goes.
_MAX_DEPTH = 16


def code_owner(fn: Any) -> Any:
    """The function whose frame a call of `fn` runs first, to key and fill
    its package by: the function of a `functools.partial` (through nested
    ones), or a callable instance's class's `__call__` bound to it (a method:
    torch's key reads its qualified name and code through it). None where
    there is no such Python function (a builtin, a C callable, a module)."""
    for _ in range(_MAX_DEPTH):
        if not isinstance(fn, functools.partial):
            break
        fn = fn.func
    if isinstance(fn, (types.FunctionType, types.MethodType)):
        return fn
    if isinstance(fn, (type, torch.nn.Module, functools.partial)) or inspect.isroutine(fn):
        return None
    call = inspect.getattr_static(type(fn), "__call__", None)
    return types.MethodType(call, fn) if isinstance(call, types.FunctionType) else None


class _CallableObjects(_Patch):
    """`torch.compile` of a partial or a callable instance runs and stores.

    With `caching_precompile` on, torch keys a wrapper's package by the
    wrapped callable's `__qualname__` and first line, and records the frames
    of its `__code__`. A `functools.partial` and an instance of a class
    defining `__call__` have neither, so the first call of
    `torch.compile(fn)` raised AttributeError, with torch's store and ours,
    where it compiles without caching_precompile. The frame such a call runs
    first is a function's: the partial's `func`, the class's `__call__`
    (bound to the instance). The package is keyed, looked up and filled for
    that function, as for `torch.compile` of the function itself. A callable
    with no such function (a builtin, whose call Dynamo traces through its own
    wrapper's frame) is left to torch, which raises as it did.

    Torch versions: 2.11 and newer raise.
    Steps aside: where `_TorchDynamoContext` has no `__call__`, or
    `CompilePackage` no `is_initialized`.
    """

    def _apply(self) -> None:
        from torch._dynamo.package import CompilePackage

        context_cls = eval_frame._TorchDynamoContext
        original_call = vars(context_cls).get("__call__")
        if original_call is None or "is_initialized" not in vars(CompilePackage):
            return

        @functools.wraps(original_call)
        def __call__(context: Any, fn: Any) -> Any:
            package = getattr(context, "_package", None)
            if (
                package is None
                or not dynamo_config.caching_precompile
                or package.is_initialized()
                or hasattr(fn, "__code__")  # a function or method: torch keys it itself
            ):
                return original_call(context, fn)
            owner = code_owner(fn)
            if owner is not None and not install_loaded(package, owner) and not package.is_initialized():
                package.initialize(owner, None, ignore_inlined_sources=False)
            return original_call(context, fn)

        self._replace(context_cls, "__call__", __call__)


callable_objects = _CallableObjects()
