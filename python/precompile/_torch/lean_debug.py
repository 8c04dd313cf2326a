"""`torch.compile` wraps its backend for the minifier without importing the minifier."""

from __future__ import annotations

import builtins
import functools
import re
import types
from typing import Any

from .patch import _Patch, source_block

_MINIFIER = "torch._dynamo.repro.after_dynamo"

# What `WrapBackendDebug.__init__` sets, in every known torch: the attributes
# `torch.compile` reads from the wrapped backend before anything compiles.
_WRAPPED_ATTRS = {"_torchdynamo_orig_backend", "_compiler_name", "__name__", "get_compiler_config"}


def _minifier_wrapper_matches() -> bool:
    """Whether the minifier's `WrapBackendDebug.__init__` sets what `_LazyBackendDebug`
    sets, read from the source file without importing it."""
    body = source_block(_MINIFIER, r"^class WrapBackendDebug:.*?(?=^    def __call__)")
    if body is None:
        return False
    return (
        "functools.wraps(unconfigured_compiler_fn)(self)" in body
        and set(re.findall(r"self\.(\w+)=", body)) == _WRAPPED_ATTRS
    )


class _LazyBackendDebug:
    """Dynamo's minifier wrapper of a backend, its module imported on the first compile.

    Sets the attributes `WrapBackendDebug.__init__` sets; a call builds the
    real wrapper (importing the minifier) and hands the graph to it, so the
    minifier's options work exactly as in torch.
    """

    def __init__(self, unconfigured_compiler_fn: Any, compiler_name: str | None) -> None:
        functools.wraps(unconfigured_compiler_fn)(self)
        self._torchdynamo_orig_backend = unconfigured_compiler_fn
        self._compiler_name = compiler_name
        if hasattr(unconfigured_compiler_fn, "__name__"):
            self.__name__ = unconfigured_compiler_fn.__name__
        if hasattr(unconfigured_compiler_fn, "compiler_name"):
            self.__name__ = unconfigured_compiler_fn.compiler_name
        if hasattr(unconfigured_compiler_fn, "get_compiler_config"):
            self.get_compiler_config = unconfigured_compiler_fn.get_compiler_config

    def __call__(self, gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
        real = self.__dict__.get("_precompile_wrapped")
        if real is None:
            from torch._dynamo.repro.after_dynamo import WrapBackendDebug

            real = WrapBackendDebug(self._torchdynamo_orig_backend, self._compiler_name)
            self.__dict__["_precompile_wrapped"] = real
        return real(gm, example_inputs, **kwargs)


_minifier_shim = types.SimpleNamespace(wrap_backend_debug=_LazyBackendDebug)


def _import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
    # `from .repro.after_dynamo import wrap_backend_debug` in eval_frame, alone.
    if name == "repro.after_dynamo" and level == 1 and tuple(fromlist or ()) == ("wrap_backend_debug",):
        return _minifier_shim
    return builtins.__import__(name, globals, locals, fromlist, level)


class _LeanBackendDebug(_Patch):
    """`torch.compile` imports Dynamo's minifier only when a frame compiles.

    `get_compiler_fn` wraps every backend in the minifier's `WrapBackendDebug`
    and imports `torch._dynamo.repro.after_dynamo` to do so, and with it
    `debug_utils` and `torch._dynamo.testing`: tenths of a second on every
    start, for a wrapper that only acts when a graph is compiled. While
    installed, torch's own `get_compiler_fn` runs with that one import
    answered by a wrapper that sets the same attributes and builds the real
    one on its first call.

    Torch versions: 2.11 and newer.
    Steps aside: where `get_compiler_fn` does not import `wrap_backend_debug`,
    or `WrapBackendDebug.__init__` (read from its source) sets other attributes.
    """

    def _apply(self) -> None:
        from torch._dynamo import eval_frame

        original = vars(eval_frame).get("get_compiler_fn")
        if not isinstance(original, types.FunctionType):
            return
        code = original.__code__
        if "wrap_backend_debug" not in code.co_names or not _minifier_wrapper_matches():
            return

        @functools.wraps(original)
        def get_compiler_fn(compiler_fn: Any) -> Any:
            # torch's own function over the module's current globals, but for
            # the one import; a copy per call, so no other import or thread
            # sees the shim.
            scope = dict(vars(eval_frame))
            scope["__builtins__"] = {**vars(builtins), "__import__": _import}
            lean = types.FunctionType(code, scope, code.co_name, original.__defaults__, original.__closure__)
            return lean(compiler_fn)

        self._replace(eval_frame, "get_compiler_fn", get_compiler_fn)


lean_backend_debug = _LeanBackendDebug()
