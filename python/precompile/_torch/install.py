"""Installing a loaded entry: backend capture, the entries the store served, install hardening, deferred collections."""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable
from typing import Any

import torch
import torch._dynamo.package as dynamo_package
from torch._dynamo.package import CompilePackage
from torch._dynamo.precompile_context import PrecompileContext
from torch._dynamo.utils import counters
from torch._functorch._aot_autograd.aot_autograd_result import BundledAOTAutogradCacheArtifact

from .kernels import _make_result_picklable
from .patch import _Patch

log = logging.getLogger(__name__)


class _BackendCapture(_Patch):
    """Records a backend for every graph AOTAutograd compiles or serves.

    torch records each graph's result under its backend id when it saves
    the result to AOTAutogradCache, or when a lookup hits. On some paths it
    does not: on CUDA, a graph served by an FX-graph cache hit inside the
    compiling process carries Triton autotuners that already ran, the save
    fails to pickle them, and nothing is recorded; the entry is then saved
    without that graph's code, which compiles again when loaded. While
    installed, the save gets picklable copies of those autotuners, and a hit
    torch did not record is recorded. The recorded artifact is the result
    torch itself serves, so an equal backend is stored once however many
    ids use it.

    Torch versions: 2.11 and newer, on the paths described (chiefly CUDA graphs
    served by an in-process FX-graph cache hit).
    Steps aside: `_apply` replaces nothing where `AOTAutogradCache._lookup` is
    not a staticmethod; `save` is wrapped only where it is one.
    """

    def _apply(self) -> None:
        from torch._functorch._aot_autograd import autograd_cache

        cache = getattr(autograd_cache, "AOTAutogradCache", None)
        lookup = None if cache is None else cache.__dict__.get("_lookup")
        save = None if cache is None else cache.__dict__.get("save")
        if not isinstance(lookup, staticmethod):
            return
        original = lookup.__func__
        if isinstance(save, staticmethod):
            original_save = save.__func__

            @functools.wraps(original_save)
            def _save(key: str, entry: Any, *args: Any, **kwargs: Any) -> Any:
                try:
                    _make_result_picklable(entry)
                except Exception:
                    log.debug("preparing Triton autotuners for the cache", exc_info=True)
                return original_save(key, entry, *args, **kwargs)

            self._replace(cache, "save", staticmethod(_save))

        @functools.wraps(original)
        def _lookup(key: str, local: bool, remote: bool, args: Any, cache_info: Any, aot_config: Any) -> Any:
            result = original(key, local, remote, args, cache_info, aot_config)
            backend_id = getattr(aot_config, "precompile_backend_id", None)
            if (
                result is not None
                and backend_id is not None
                and PrecompileContext.serialize_artifact_by_key(backend_id) is None
            ):
                counters["precompile"]["backends_captured"] += 1
                PrecompileContext.record_artifact(BundledAOTAutogradCacheArtifact(backend_id, result[0]))
            return result

        self._replace(cache, "_lookup", staticmethod(_lookup))


backend_capture = _BackendCapture()


class InstallFailed(RuntimeError):
    """A loaded entry could not be installed; torch compiles the function."""


class _ServedEntries:
    """The entries the store's `load` handed torch, until torch installs them.

    Only those installs are the store's: a caller may build a
    `CompilePackage` by hand and install it (torch's own tests do), and that
    install must behave exactly as torch's, raise what torch raises, and say
    nothing in the store's warning, counters or `explain`. An entry is known
    by its `backends` dict, the object Dynamo passes to `install`.
    """

    # Entries loaded but never installed (a caller of `load` alone) are
    # dropped beyond this many, oldest first.
    MAX_HELD = 64

    def __init__(self) -> None:
        self._held: dict[int, Any] = {}
        self._lock = threading.Lock()
        self._installing = threading.local()

    def hand(self, entry: Any) -> None:
        """Note that `entry` goes to torch from the store."""
        with self._lock:
            while len(self._held) >= self.MAX_HELD:
                self._held.pop(next(iter(self._held)))
            self._held[id(entry.backends)] = entry.backends

    def take(self, backends: Any) -> bool:
        """Whether `backends` is a handed entry's; each is taken once."""
        # Held entries are kept alive here, so an id found is this object's.
        with self._lock:
            return self._held.pop(id(backends), None) is not None

    @contextlib.contextmanager
    def installing(self) -> Any:
        """Mark this thread as installing a store entry."""
        outer = getattr(self._installing, "on", False)
        self._installing.on = True
        try:
            yield
        finally:
            self._installing.on = outer

    def installing_now(self) -> bool:
        """Whether this thread is inside the install of a store entry."""
        return getattr(self._installing, "on", False)

    def clear(self) -> None:
        with self._lock:
            self._held.clear()


served_entries = _ServedEntries()


class _InstallHardening(_Patch):
    """Makes installing a loaded entry all-or-nothing.

    An entry whose guards cannot be rebuilt here makes
    `CompilePackage.install` raise whatever the guard unpickler raises,
    part-way through, and Dynamo only catches RuntimeError. While installed,
    a failed install of an entry the store served is undone completely
    (globals, guarded entries, the package's state) and raised as
    RuntimeError: Dynamo then compiles the function as if nothing was
    stored. Any other install is torch's own (`_ServedEntries`).

    Torch versions: 2.11 and newer: every release lets a guard unpickling error
    escape `install` part-way.
    Steps aside: never; `CompilePackage.install` is wrapped on every torch, and
    installs of entries the store did not serve are torch's own.
    """

    def __init__(self) -> None:
        super().__init__()
        self.on_failure: Callable[[Any, BaseException], None] | None = None

    def set_on_failure(self, on_failure: Callable[[Any, BaseException], None]) -> None:
        """Called with the package and the error before a failed install is undone."""
        self.on_failure = on_failure

    def _apply(self) -> None:
        original = vars(CompilePackage)["install"]
        hardening = self

        @functools.wraps(original)
        def install(package: Any, backends: Any) -> None:
            if not served_entries.take(backends):
                original(package, backends)
                return
            try:
                with served_entries.installing(), deferred_full_gc():
                    original(package, backends)
            except Exception as e:
                # Told first: undoing resets the package, its function too.
                if hardening.on_failure is not None:
                    hardening.on_failure(package, e)
                _undo_install(package)
                raise InstallFailed(f"{type(e).__name__}: {e}") from e

        self._replace(CompilePackage, "install", install)

    def _stopped(self) -> None:
        served_entries.clear()


install_hardening = _InstallHardening()


def _undo_install(package: Any) -> None:
    """Remove what a failed install left: globals and guarded entries."""
    from torch._C._dynamo.eval_frame import _reset_precompile_entries

    try:
        package.uninstall()
    except Exception:
        log.debug("uninstalling a failed package", exc_info=True)
    for code, entry in getattr(package, "_codes", {}).items():
        targets = [code]
        if getattr(entry, "code_source", None):
            try:
                targets.append(dynamo_package._lookup_code(entry))
            except Exception:
                pass
        for target in targets:
            try:
                _reset_precompile_entries(target)
            except Exception:
                log.debug("resetting precompile entries", exc_info=True)
    # Dynamo answers a failed install by initializing the same package
    # afresh, which it refuses for an initialized one: make it new again.
    try:
        type(package).__init__(package, None)
    except Exception:
        log.debug("resetting a failed package", exc_info=True)


def _own_deferred_full_gc() -> Callable[[], contextlib.AbstractContextManager[None]]:
    """torch's `deferred_full_gc` for a torch without it (2.11): the same
    reentrant, process-wide raise of CPython's generation-2 threshold, to
    torch's default of 1000 (none on a free-threaded build, whose collector
    is not generational)."""
    import gc
    import sysconfig

    lock = threading.Lock()
    state: dict[str, Any] = {"depth": 0, "saved": None}
    inert = sysconfig.get_config_var("Py_GIL_DISABLED") == 1

    @contextlib.contextmanager
    def deferred() -> Any:
        if inert:
            yield
            return
        with lock:
            if state["depth"] == 0:
                state["saved"] = gc.get_threshold()
                gen0, gen1, gen2 = state["saved"]
                gc.set_threshold(gen0, gen1, max(gen2, 1000))
            state["depth"] += 1
        try:
            yield
        finally:
            with lock:
                state["depth"] -= 1
                if state["depth"] == 0 and state["saved"] is not None:
                    gc.set_threshold(*state["saved"])
                    state["saved"] = None

    return deferred


# Loading a stored entry grows the heap as a compile does (unpickled graphs
# and guard states, the generated code's imports): a full collection then
# rescans hundreds of thousands of new objects, each time the heap grows by
# a quarter (two of them, about 0.3 s each, in resnet18's fresh start on a
# 2-core host). torch defers those during a compile
# (`config.gc_gen2_threshold_during_compile`); the store's load and install
# of an entry run under the same deferral, torch's own where it has one, so
# its setting (None: off) holds. Deferred, not skipped: a full collection
# follows soon after.
deferred_full_gc: Callable[[], contextlib.AbstractContextManager[None]] = (
    getattr(torch._dynamo.utils, "deferred_full_gc", None) or _own_deferred_full_gc()
)


class _BackendSetupGC(_Patch):
    """`torch.compile`'s backend setup runs under `deferred_full_gc`.

    Before any cache lookup, `torch._dynamo.optimize` resolves the backend,
    and Inductor's `get_compiler_config` imports `compile_fx` and with it
    every lowering: the largest growth of the heap on a warm start, where a
    full collection lands. With the store's load and install under the same
    deferral, no full collection runs inside these three windows; one may
    still run before them (during `import precompile`'s torch imports) or
    after. The window is `_optimize` alone, as torch bounds its own to a
    compile; what it returns is torch's.

    Torch versions: 2.11 and newer: torch defers full collections during a
    compile only, not during backend setup.
    Steps aside: `_apply` replaces nothing where
    `torch._dynamo.eval_frame._optimize` is missing.
    """

    def _apply(self) -> None:
        from torch._dynamo import eval_frame

        original = getattr(eval_frame, "_optimize", None)
        if original is None:
            return

        @functools.wraps(original)
        def _optimize(*args: Any, **kwargs: Any) -> Any:
            with deferred_full_gc():
                return original(*args, **kwargs)

        self._replace(eval_frame, "_optimize", _optimize)


backend_setup_gc = _BackendSetupGC()
