"""DistributedDataParallel's DDPOptimizer: the frames torch compiles through it are never recorded, and the store says so."""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from typing import Any

from torch._dynamo import config as dynamo_config
from torch._dynamo import eval_frame

from .patch import _Patch

log = logging.getLogger(__name__)


def _nothing() -> None:
    return None


def ddp_optimizer_active() -> bool:
    """Whether Dynamo would compile a frame starting now through DDPOptimizer:
    inside a DistributedDataParallel forward, with `optimize_ddp` in its
    `ddp_optimizer` mode."""
    # Never imports torch.distributed: a process without DDP has no active module.
    distributed = sys.modules.get("torch.nn.parallel.distributed")
    ddp = getattr(distributed, "DistributedDataParallel", None)
    active = getattr(ddp, "_get_active_ddp_module", None)
    if active is None or active() is None:
        return False
    from torch._dynamo.utils import get_optimize_ddp_mode

    try:
        return get_optimize_ddp_mode() == "ddp_optimizer"
    except (AssertionError, ValueError):
        return False


class _DDPOptimizerFrames(_Patch):
    """A module compiled inside DistributedDataParallel under DDPOptimizer is compiled again by every process, and the store says why.

    With `torch._dynamo.config.optimize_ddp` in its `ddp_optimizer` mode
    (torch's default), Dynamo compiles a frame that runs inside a
    DistributedDataParallel forward through DDPOptimizer, which compiles the
    graph one gradient bucket at a time and drops the wrapper's package:
    torch records no entry for it, with its own store as with this one, and
    every start compiles it again without a word. While installed, the first
    call of a compiled wrapper inside an active DDP module in that mode
    records an `unstorable` miss (`explain`, the counters, one warning) that
    names the setting: `optimize_ddp=False` compiles the graph whole and
    stores it, without DDPOptimizer's bucket-by-bucket overlap of
    communication and compute.

    Torch versions: 2.11 and newer: every release drops the package there.
    Steps aside: where `_TorchDynamoContext` has no `__call__` or
    `enter_exit_hooks`.
    """

    def __init__(self) -> None:
        super().__init__()
        self._on_unstored: Callable[[Any, str], None] = lambda fn, detail: None

    def set_on_unstored(self, callback: Callable[[Any, str], None]) -> None:
        """`callback(fn, detail)`: `fn`'s frames are compiled and not stored."""
        self._on_unstored = callback

    def _apply(self) -> None:
        context_cls = eval_frame._TorchDynamoContext
        original_call = vars(context_cls).get("__call__")
        if original_call is None:
            return
        hook = self

        @functools.wraps(original_call)
        def __call__(context: Any, fn: Any) -> Any:
            wrapped = original_call(context, fn)
            hooks = getattr(context, "enter_exit_hooks", None)
            package = getattr(context, "_package", None)
            # torch may wrap more than one callable with one context (a
            # module's `forward` and `_call_impl`): one note per context.
            if (
                package is not None
                and dynamo_config.caching_precompile
                and isinstance(hooks, list)
                and not any(getattr(h, "func", None) == hook._first_call for h in hooks)
            ):
                hooks.append(functools.partial(hook._first_call, package, [False]))
            return wrapped

        self._replace(context_cls, "__call__", __call__)

    def _first_call(self, package: Any, done: list[bool]) -> Callable[[], None]:
        if done[0]:
            return _nothing
        done[0] = True
        try:
            if not ddp_optimizer_active():
                return _nothing
        except Exception:
            log.debug("checking for DDPOptimizer", exc_info=True)
            return _nothing
        fn = getattr(package, "_innermost_fn", None)
        self._on_unstored(
            fn,
            "compiled inside DistributedDataParallel under DDPOptimizer "
            "(torch._dynamo.config.optimize_ddp='ddp_optimizer', the default), for which torch records "
            "no entry: every process compiles it; set torch._dynamo.config.optimize_ddp = False to store it",
        )
        return _nothing


ddp_optimizer_frames = _DDPOptimizerFrames()
