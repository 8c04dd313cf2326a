"""Reading placeholders (``L['t0']`` and ``L['t0'].size()[i]`` and friends)
out of the argument mapping a compiled guard is evaluated against."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any, Final

from ._errors import GuardEvaluationError

_Env = Mapping[str, object]
_Fn = Callable[[_Env], Any]

_ARG_SCALARS: Final = frozenset({int, float, bool})


def _ref(name: str) -> str:
    return f"L[{name!r}]"


def _missing(name: str) -> GuardEvaluationError:
    return GuardEvaluationError(f"guard reads {_ref(name)} but no such argument was given")


def _scalar_loader(name: str) -> _Fn:
    def load(env: _Env) -> Any:
        try:
            value = env[name]
        except KeyError:
            raise _missing(name) from None
        if type(value) not in _ARG_SCALARS:
            raise GuardEvaluationError(f"{_ref(name)} must be an int, float or bool, got {type(value).__name__}")
        return value

    return load


def _torch_tensor_type() -> type | None:
    # Tensors can only exist if the caller already imported torch; looking it
    # up lazily keeps this module importable (and fast to import) without it.
    torch = sys.modules.get("torch")
    tensor = getattr(torch, "Tensor", None) if torch is not None else None
    return tensor if isinstance(tensor, type) else None


def _tensor_prop_loader(name: str, prop: str, index: int | None) -> _Fn:
    rendered = f"{_ref(name)}.{prop}()" + (f"[{index}]" if index is not None else "")

    def load(env: _Env) -> Any:
        try:
            value: Any = env[name]
        except KeyError:
            raise _missing(name) from None
        tensor_type = _torch_tensor_type()
        if tensor_type is None or not isinstance(value, tensor_type):
            raise GuardEvaluationError(
                f"{rendered} needs {_ref(name)} to be a torch.Tensor, got {type(value).__name__}"
            )
        tensor: Any = value  # narrowed by isinstance to an opaque type
        if index is None:
            result = tensor.storage_offset()
        else:
            dims = tensor.size() if prop == "size" else tensor.stride()
            try:
                result = dims[index]
            except IndexError:
                raise GuardEvaluationError(f"{rendered}: tensor has only {len(dims)} dimension(s)") from None
        if type(result) is not int:
            # A FakeTensor with symbolic shapes yields SymInt; we only do
            # concrete evaluation.
            raise GuardEvaluationError(f"{rendered} is a {type(result).__name__}, not a concrete int")
        return result

    return load
