"""One side of a bypass test: frames whose guards check objects no name binds, run as a subprocess.

    python bypasses.py NAME compile|load STORE OUT_JSON

`lambda`: calls a module-level lambda (`ACT`, a CLOSURE_MATCH guard).
`local_class`: reads an attribute of an instance of a class defined inside
a function (a TYPE_MATCH guard on a local class). `bound_local_class`: a
module calls a private instance of a class made inside a function whose
instance a module-level name holds (`SCALE`, as the `kernels` package wraps
transformers' hub functions). `nested_class`: reads an attribute of an
instance of a class nested in a class. `function_class`:
reads the class of a module-level function, as torchvision's
`_log_api_usage_once` does (an ID_MATCH guard on `G[...].__class__`, the
interpreter's `function` type). `identity`: branches on `CHOICE is MARK` for
an instance. `named_alias`: calls a module-level function through another
global (`NAMED_ACT = _relu`); `builtin_alias` and `class_alias` call a
builtin (`torch.relu`) and a class through another global. `cached_helper`: calls a module-level
`functools.lru_cache` function, which Dynamo traces through (a CLOSURE_MATCH
guard on `G[...].__wrapped__`). With `PRECOMPILE_TEST_OTHER=1` each global
holds another object of the same source line (another lambda, another
instance, an instance of a class made by other code), as a later process
may. Writes the outputs (OUT_JSON.pt) and the counters (OUT_JSON).
"""

from __future__ import annotations

import enum
import functools
import json
import os
import sys
import types

import torch

import precompile

OTHER = os.environ.get("PRECOMPILE_TEST_OTHER") == "1"

ACT = (lambda t: t.sigmoid()) if OTHER else (lambda t: t.relu())


class Marker:
    pass


MARK = Marker()
CHOICE = Marker() if OTHER else MARK


class Action(enum.Enum):
    NONE = 0
    SCALE = 1


PICK = Action.SCALE if OTHER else Action.NONE


def _relu(t: torch.Tensor) -> torch.Tensor:
    return t.relu()


def _sigmoid(t: torch.Tensor) -> torch.Tensor:
    return t.sigmoid()


NAMED_ACT = _sigmoid if OTHER else _relu
BUILTIN_ACT = torch.sigmoid if OTHER else torch.relu


class ReluBlock(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.relu()


class SigmoidBlock(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sigmoid()


BLOCK = SigmoidBlock if OTHER else ReluBlock


@functools.cache
def _inverse_frequencies(dim: int) -> tuple[float, ...]:
    return tuple(1.0 / (10000 ** (i / dim)) for i in range(0, dim, 2))


def _local_class() -> type:
    class Scale:
        factor = 3.0

    return Scale


def _func_module() -> type:
    # Two bodies, one qualified name: what tells them apart is their code.
    if OTHER:

        class Func(torch.nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return x * 4.0

    else:

        class Func(torch.nn.Module):  # type: ignore[no-redef]
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return x * 3.0

    Func.__module__ = __name__
    return Func


SCALE = _func_module()()


class UsesScale(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        # A plain dict attribute, not a submodule, as `kernels` keeps them.
        self.funcs = {"scale": type(SCALE)()}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.funcs["scale"](x).sin() + 1


class Outer:
    class Inner:
        factor = 3.0


def _usage_name(obj: object) -> str:
    # torchvision's `_log_api_usage_once`: the class's name, or the function's.
    name = obj.__class__.__name__
    if isinstance(obj, types.FunctionType):
        name = obj.__name__
    return f"{obj.__module__}.{name}"


def through_function_class(x: torch.Tensor) -> torch.Tensor:
    return x.sin() * len(_usage_name(through_function_class))


def through_lambda(x: torch.Tensor) -> torch.Tensor:
    return ACT(x) + 1


def through_local_class(x: torch.Tensor, scale: object) -> torch.Tensor:
    return x * scale.factor  # type: ignore[attr-defined]


def through_named_alias(x: torch.Tensor) -> torch.Tensor:
    return NAMED_ACT(x) + 1


def through_builtin_alias(x: torch.Tensor) -> torch.Tensor:
    return BUILTIN_ACT(x) + 1


def through_class_alias(x: torch.Tensor) -> torch.Tensor:
    return BLOCK()(x) * 2


def through_cached_helper(x: torch.Tensor) -> torch.Tensor:
    return x * _inverse_frequencies(x.shape[-1])[1]


def through_identity(x: torch.Tensor) -> torch.Tensor:
    return x.sin() if CHOICE is MARK else x.cos()


def through_enum_member(x: torch.Tensor, action: Action) -> torch.Tensor:
    return x.sin() if action is Action.NONE else x.cos()


def through_enum_global(x: torch.Tensor) -> torch.Tensor:
    return x.sin() if PICK is Action.NONE else x.cos()


def main() -> None:
    name, mode, store, out_path = sys.argv[1:5]
    from torch._dynamo.utils import counters

    precompile.install(store, save_on_exit=False)
    torch.manual_seed(0)
    x = torch.randn(8)
    calls = {
        "lambda": (through_lambda, (x,)),
        "local_class": (through_local_class, (x, _local_class()())),
        "bound_local_class": (UsesScale(), (x,)),
        "nested_class": (through_local_class, (x, Outer.Inner())),
        "function_class": (through_function_class, (x,)),
        "identity": (through_identity, (x,)),
        "named_alias": (through_named_alias, (x,)),
        "cached_helper": (through_cached_helper, (x,)),
        "builtin_alias": (through_builtin_alias, (x,)),
        "class_alias": (through_class_alias, (x,)),
        "enum_member": (through_enum_member, (x, Action.SCALE if OTHER else Action.NONE)),
        "enum_global": (through_enum_global, (x,)),
    }
    fn, args = calls[name]
    out = torch.compile(fn)(*args)
    expected = fn(*args)
    if mode == "compile":
        precompile.save()
    torch.save([out, expected], out_path + ".pt")
    with open(out_path, "w") as f:
        json.dump({"counters": {k: dict(v) for k, v in counters.items()}}, f)


if __name__ == "__main__":
    main()
