"""One side of a bypass test: frames whose guards check objects no name binds, run as a subprocess.

    python bypasses.py NAME compile|load STORE OUT_JSON

`lambda`: calls a module-level lambda (`ACT`, a CLOSURE_MATCH guard).
`local_class`: reads an attribute of an instance of a class defined inside
a function (a TYPE_MATCH guard on a local class). `identity`: branches on
`CHOICE is MARK` for an instance. With `PRECOMPILE_TEST_OTHER=1` each global
holds another object of the same source line (another lambda, another
instance), as a later process may. Writes the outputs (OUT_JSON.pt) and the
counters (OUT_JSON).
"""

from __future__ import annotations

import enum
import json
import os
import sys

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


def _local_class() -> type:
    class Scale:
        factor = 3.0

    return Scale


def through_lambda(x: torch.Tensor) -> torch.Tensor:
    return ACT(x) + 1


def through_local_class(x: torch.Tensor, scale: object) -> torch.Tensor:
    return x * scale.factor  # type: ignore[attr-defined]


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
        "identity": (through_identity, (x,)),
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
