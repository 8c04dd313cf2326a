"""A method compiled in its class body looks its entry up on its first call, once its class exists."""

from __future__ import annotations

import contextvars
import functools
import logging
import threading
import types
from collections.abc import Callable
from typing import Any

from torch._dynamo import config as dynamo_config
from torch._dynamo import eval_frame

from .lineages import _loading_tag, context_lineage, tag_of
from .patch import _Patch

log = logging.getLogger(__name__)

_deferring: contextvars.ContextVar[bool] = contextvars.ContextVar("precompile_class_body", default=False)


def lookup_deferred() -> bool:
    """Whether the lookup running now is one this patch moves to the first call."""
    return _deferring.get()


def _owner_unbound(fn: Any) -> bool:
    """`fn` is a function defined in a class body that is still running: its
    qualified name starts with a name its module does not bind yet."""
    if not isinstance(fn, types.FunctionType):
        return False
    owner, dot, _ = fn.__qualname__.partition(".")
    return bool(dot) and owner != "<locals>" and "<locals>" not in fn.__qualname__ and owner not in fn.__globals__


def _nothing() -> None:
    return None


def lazy_package_call() -> Any:
    """`_TorchDynamoContext.__call__` as it is now, where torch initializes a
    wrapper's package lazily there (its `is_initialized`): the call a patch
    wraps to act on a wrapper's lookup. None where torch has neither."""
    from torch._dynamo.package import CompilePackage

    original_call = vars(eval_frame._TorchDynamoContext).get("__call__")
    if original_call is None or "is_initialized" not in vars(CompilePackage):
        return None
    return original_call


def install_loaded(package: Any, fn: Any) -> bool:
    """Look `fn`'s entry up now and install it into `package`, a wrapper's
    package that started empty; whether an entry was installed. An entry
    that does not install leaves the package empty, as torch leaves it."""
    from torch._dynamo.package import DynamoCache

    result = DynamoCache.load(fn)
    if result is None:
        return False
    package._initialized = False
    try:
        package.initialize(fn, result.dynamo, ignore_inlined_sources=False)
        package.install(result.backends)
    except Exception as e:
        # torch's own answer to an entry that does not install (its
        # RuntimeError): start empty, so the call compiles and records.
        if isinstance(e, RuntimeError):
            log.warning("Failed to load entry from dynamo cache", exc_info=True)
        else:
            log.debug("installing the entry of %s", getattr(fn, "__qualname__", fn), exc_info=True)
        package._initialized = False
        package.initialize(fn, None, ignore_inlined_sources=False)
        return False
    return True


class _ClassBodyMethods(_Patch):
    """`@torch.compile` on a method in its class body finds its stored entry.

    torch looks a wrapper's entry up when `torch.compile` wraps the function.
    For a method decorated in its class body that is while the class body
    runs: the class is not bound in its module yet, so the stored guards
    (which name it, `G['Model']`) do not unpickle, the lookup is a
    `guards_unreadable` miss, and the method compiles on its first call.
    While installed, such a lookup waits: the wrapper starts empty, as torch
    starts it on a miss, and on its first call, when the class exists, the
    entry is looked up and installed before the frame runs. A method whose
    class is bound when it is wrapped is looked up at once, as before.

    Torch versions: 2.11 and newer: every release looks up at wrap time.
    Steps aside: where `_TorchDynamoContext` has no `__call__` or
    `enter_exit_hooks`, or `CompilePackage` keeps no `_initialized` flag.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def _apply(self) -> None:
        context_cls = eval_frame._TorchDynamoContext
        original_call = lazy_package_call()
        if original_call is None:
            return
        hook = self

        @functools.wraps(original_call)
        def __call__(context: Any, fn: Any) -> Any:
            package = getattr(context, "_package", None)
            hooks = getattr(context, "enter_exit_hooks", None)
            if (
                package is None
                or not dynamo_config.caching_precompile
                or not isinstance(hooks, list)
                or not hasattr(package, "_initialized")
                or package.is_initialized()
                or not _owner_unbound(fn)
            ):
                return original_call(context, fn)
            token = _deferring.set(True)
            try:
                wrapped = original_call(context, fn)
            finally:
                _deferring.reset(token)
            try:
                tag = tag_of(context_lineage(context))
            except Exception:  # an undescribable backend: the default lineage, as wrapper_lineages does
                tag = ""
            hooks.append(functools.partial(hook._first_call, package, fn, tag, [False]))
            return wrapped

        self._replace(context_cls, "__call__", __call__)

    def _first_call(self, package: Any, fn: Any, tag: str, done: list[bool]) -> Callable[[], None]:
        if done[0]:
            return _nothing
        with self._lock:
            if done[0]:
                return _nothing
            done[0] = True
            if _owner_unbound(fn):
                return _nothing  # called from its own class body: nothing to look up by
            token = _loading_tag.set(tag)
            try:
                install_loaded(package, fn)
            except Exception:  # the wrapper keeps the empty package: the call compiles, as on a miss
                log.debug("looking up the entry of %s on its first call", fn.__qualname__, exc_info=True)
            finally:
                _loading_tag.reset(token)
        return _nothing


class_body_methods = _ClassBodyMethods()
