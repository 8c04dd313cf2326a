"""Single-flight compiles: of the processes sharing a store, one compiles a function and the others wait for its entry."""

from __future__ import annotations

import contextvars
import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from torch._dynamo import config as dynamo_config
from torch._dynamo import eval_frame

from ..compile_lock import CompileLock
from .class_body import install_loaded, lazy_package_call
from .classes import counters
from .lineages import _loading_tag, loading_tag
from .patch import _Patch

log = logging.getLogger(__name__)

# `install(single_flight=None)` reads these.
MODE_ENV = "PRECOMPILE_SINGLE_FLIGHT"
TIMEOUT_ENV = "PRECOMPILE_SINGLE_FLIGHT_TIMEOUT"
DEFAULT_TIMEOUT_S = 900.0

# The misses of the wrap running now: (key, lineage tag), noted by the store's
# load, read by the wrapper that made the lookup.
_misses: contextvars.ContextVar[list[tuple[str, str, Any]] | None] = contextvars.ContextVar(
    "precompile_single_flight_misses", default=None
)


def _nothing() -> None:
    return None


def distributed_world_size() -> int:
    """The default process group's world size; 1 without one."""
    import sys

    # Never imports torch.distributed: a process that did not start a group has none.
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return 1
        return int(dist.get_world_size())
    except Exception:
        return 1


def compiler_collectives() -> bool:
    """Whether Dynamo's compile itself runs collectives among the ranks
    (`enable_compiler_collectives`): a rank waiting for another's compile
    would then leave that compile waiting for it."""
    return bool(getattr(dynamo_config, "enable_compiler_collectives", False))


def mode_from_env() -> bool | None:
    """`PRECOMPILE_SINGLE_FLIGHT`: 1 on, 0 off, unset (or `auto`) on only in a distributed job."""
    raw = os.environ.get(MODE_ENV, "").strip().lower()
    if raw in ("", "auto"):
        return None
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{MODE_ENV} must be 1, 0 or auto, not {raw!r}")


def timeout_from_env() -> float:
    """`PRECOMPILE_SINGLE_FLIGHT_TIMEOUT`: seconds a process waits for another's compile."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{TIMEOUT_ENV} must be a number of seconds, not {raw!r}") from None
    if not value >= 0:
        raise ValueError(f"{TIMEOUT_ENV} must be a number of seconds, not {raw!r}")
    return value


def note_miss(key: str, fn: Any) -> None:
    """The store's lookup of `key` for `fn` found nothing: the wrapper making
    it may wait on its first call."""
    misses = _misses.get()
    if misses is not None:
        misses.append((key, loading_tag(), fn))


class _Settings:
    """What `install()` set: the store's root, the mode, and the store's callbacks."""

    def __init__(self) -> None:
        self.root: str | None = None
        self.mode: bool | None = False
        self.timeout = DEFAULT_TIMEOUT_S
        self.stored: Callable[[str], bool] = lambda key: False
        self.save: Callable[[Any, str, CompileLock], None] = lambda package, key, lock: lock.release()
        self.on_timeout: Callable[[str, float, Any], None] = lambda key, waited, fn: None


class _SingleFlight(_Patch):
    """A function no process has stored yet compiles in one process of the host; the others wait for its entry.

    torch looks a function's entry up once, when `torch.compile` wraps it. Ranks
    of a distributed job (or serving processes started together) all miss on an
    empty store, and every one of them compiles the same graphs. While
    installed, a wrapper whose lookup missed takes the key's compile lock
    (`compile_lock`, in the store's `locks/`) on its first call, before its
    frame runs: the holder compiles, saves that entry and releases the lock
    when the first call returns (in a job of several ranks: as soon as
    Dynamo has compiled the frame, before the compiled code runs, so
    collectives in the graph never wait on a rank that waits on the lock);
    a process that found the lock taken waits for it, then looks the key up
    again and installs what the holder stored, compiling nothing. The wait
    happens on the first call rather than at wrap time because collectives
    between the two (DistributedDataParallel's construction broadcasts from
    rank 0) need every rank. A holder that dies releases the lock with its
    process; a wait longer than the timeout compiles.

    On in a job whose default process group has more than one rank, or
    always with `install(single_flight=True)` / `PRECOMPILE_SINGLE_FLIGHT=1`;
    off where Dynamo runs compiler collectives, and for a store with no local
    directory.

    Torch versions: 2.11 and newer: every release looks an entry up at wrap
    time only. Steps aside: where `_TorchDynamoContext` has no `__call__` or
    `enter_exit_hooks`, or `CompilePackage` keeps no `_initialized` flag.
    """

    def __init__(self) -> None:
        super().__init__()
        self.settings = _Settings()
        self._lock = threading.Lock()
        # The compile locks this process holds, by package, until the entry is
        # saved: (package, key, lock, whether it is saved when the first call returns).
        self._held: dict[int, tuple[Any, str, CompileLock, bool]] = {}

    def configure(
        self,
        root: str | None,
        *,
        mode: bool | None,
        timeout: float,
        stored: Callable[[str], bool],
        save: Callable[[Any, str, CompileLock], None],
        on_timeout: Callable[[str, float, Any], None],
    ) -> None:
        """`stored(key)`: whether the store holds an entry for `key`;
        `save(package, key, lock)`: store `package`'s entry under `key`, then
        release `lock`; `on_timeout(key, waited_s, fn)`: a wait ran out."""
        s = self.settings
        s.root, s.mode, s.timeout, s.stored, s.on_timeout = root, mode, timeout, stored, on_timeout
        s.save = save

    def enabled(self) -> bool:
        s = self.settings
        if s.root is None or s.mode is False or compiler_collectives():
            return False
        return s.mode is True or distributed_world_size() > 1

    def _apply(self) -> None:
        original_call = lazy_package_call()
        if original_call is None:
            return
        hook = self

        @functools.wraps(original_call)
        def __call__(context: Any, fn: Any) -> Any:
            package = getattr(context, "_package", None)
            hooks = getattr(context, "enter_exit_hooks", None)
            if package is None or not dynamo_config.caching_precompile or not isinstance(hooks, list):
                return original_call(context, fn)
            misses: list[tuple[str, str, Any]] = []
            token = _misses.set(misses)
            try:
                wrapped = original_call(context, fn)
            finally:
                _misses.reset(token)
            if misses and hasattr(package, "_initialized"):
                key, tag, fn_key = misses[-1]
                hooks.append(functools.partial(hook._first_call, package, fn_key, key, tag, [False]))
            return wrapped

        self._replace(eval_frame._TorchDynamoContext, "__call__", __call__)

    def _first_call(self, package: Any, fn: Any, key: str, tag: str, done: list[bool]) -> Callable[[], None]:
        with self._lock:
            if done[0]:
                return _nothing
            done[0] = True
        if not self.enabled():
            return _nothing
        root = self.settings.root
        assert root is not None
        try:
            lock = CompileLock(root, key)
            if not lock.try_acquire():
                counters["precompile"]["compile_waits"] += 1
                log.info("waiting for another process's compile of %s", key[:16])
                start = time.monotonic()
                if not lock.acquire(self.settings.timeout):
                    counters["precompile"]["compile_wait_timeouts"] += 1
                    self.settings.on_timeout(key, time.monotonic() - start, fn)
                    return _nothing
        except (OSError, ValueError):
            # No lock to be had (a read-only store, say): compile, as without single flight.
            log.debug("the compile lock of %s", key[:16], exc_info=True)
            return _nothing
        try:
            # Another process may have stored the entry since the wrap's lookup.
            if self.settings.stored(key) and self._load(package, fn, tag):
                counters["precompile"]["compile_waits_served"] += 1
                lock.release()
                return _nothing
        except Exception:
            log.debug("looking %s up again", key[:16], exc_info=True)
        # In a job of several ranks the entry is saved as soon as Dynamo has
        # compiled the frame: the compiled code may hold collectives that
        # need the waiting ranks. Otherwise the lock is kept until the first
        # call returns, so that the frames Dynamo compiles during it (those
        # after a graph break) are in the entry the waiters load.
        until_return = distributed_world_size() == 1
        with self._lock:
            self._held[id(package)] = (package, key, lock, until_return)
        return functools.partial(self._returned, package)

    @staticmethod
    def _load(package: Any, fn: Any, tag: str) -> bool:
        token = _loading_tag.set(tag)
        try:
            return install_loaded(package, fn)
        finally:
            _loading_tag.reset(token)

    def compiled(self, package: Any) -> None:
        """Dynamo compiled a frame of `package` and torch recorded it: save the
        entry now if other ranks wait for it."""
        with self._lock:
            held = self._held.get(id(package))
            if held is None or held[3]:
                return
            del self._held[id(package)]
        self.settings.save(package, held[1], held[2])

    def _returned(self, package: Any) -> None:
        # The first call returned: save what it compiled, if the save waited
        # for the return. Where nothing was compiled (the frame was skipped, or
        # the compile failed), the save finds nothing and only releases, so
        # the waiters compile.
        with self._lock:
            held = self._held.pop(id(package), None)
        if held is not None:
            self.settings.save(package, held[1], held[2])

    def _stopped(self) -> None:
        with self._lock:
            held, self._held = list(self._held.values()), {}
        for _, _, lock, _ in held:
            lock.release()


single_flight = _SingleFlight()
