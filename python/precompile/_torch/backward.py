"""AOTAutograd's lazy backward: a training graph whose backward never ran, completed at save.

For a training graph (inputs or parameters that require grad, grad mode on)
AOTAutograd compiles the forward at once and the backward on the first
backward call. Only then does it make the graph's cache result and record
it, under its precompile backend id, for the precompile save. A process that
only runs forward (the common inference script: no `torch.no_grad()`, a model
whose parameters require grad) therefore records the graph's Dynamo code but
never its backend, and the save has no graph to store.

While installed, `pending_backwards` remembers each backward torch defers,
and `compile_pending(ids)` compiles those whose backend is missing at save,
as torch's first backward call compiles them, so that torch records the
graph. The live function shares that compiled backward: should it ever run
backward, it compiles nothing more.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import inspect
import logging
import threading
import time
import weakref
from collections.abc import Callable, Collection
from typing import Any

import torch
from torch._dynamo.utils import counters
from torch._guards import compile_context, tracing

from .patch import _Patch

log = logging.getLogger(__name__)

__all__ = ["BackwardFailure", "compile_pending", "pending_backwards"]


@dataclasses.dataclass(frozen=True)
class BackwardFailure:
    """A deferred backward that could not be compiled at save: why."""

    backend_id: str
    reason: str


class _OnceCompiler:
    """torch's backward compiler, run at most once per graph.

    Whoever asks first (the save, or torch's first backward call) compiles;
    the other gets the same compiled backward. A compile that raises is not
    kept: the next caller compiles again, and raises what torch raises.
    """

    def __init__(self, compile_fn: Callable[..., Any]) -> None:
        self._compile = compile_fn
        self._compiled: Any = None
        self._lock = threading.Lock()

    @property
    def compiled(self) -> bool:
        """Whether the backward is compiled (by the save or by torch's call)."""
        return self._compiled is not None

    def __call__(self, module: Any, placeholders: Any, prepare: Callable[[], None] | None = None) -> Any:
        """The compiled backward; `prepare` runs first if this call compiles."""
        with self._lock:
            if self._compiled is None:
                if prepare is not None:
                    prepare()
                self._compiled = self._compile(module, placeholders)
            return self._compiled


@dataclasses.dataclass
class _Pending:
    """What torch's first backward call needs to compile one graph's backward.

    It holds no reference to the graph's lazy-backward info (the key it is
    filed under, weakly): once torch drops the compiled function, the
    record goes with it.
    """

    backend_id: str
    compiler: _OnceCompiler
    disable_amp: bool
    aot_config: Any
    fw_metadata: Any
    try_save_cache_entry: Callable[..., Any]


class _PendingBackwards(_Patch):
    """Keeps each backward AOTAutograd defers, so that a save can compile it.

    torch compiles a training graph's backward on the first backward call
    and records the graph's backend for precompile only then: a process that
    runs only forward saves the entry without the graph, and the next
    process compiles the function again. While installed, every deferred
    backward with a precompile backend id is kept (weakly: it lives as long
    as torch's compiled function), and its compiler runs once, shared by the
    save and torch's own backward call.

    Torch versions: 2.11 and newer (`AOTDispatchAutograd.post_compile` takes
    the lazy backward as arguments on 2.11, as one compile spec on newer; the
    backward compiler is the config's on 2.11 and 2.12, the spec's after).
    Steps aside: `_apply` replaces nothing where `AOTDispatchAutograd` has no
    static `post_compile`; a call whose arguments are neither shape, or whose
    backward is already compiled, passes through untouched.
    """

    def __init__(self) -> None:
        super().__init__()
        # By id of torch's lazy-backward info (an unhashable dataclass), with
        # a weak reference to it that drops the entry when torch drops it.
        self._pending: dict[int, tuple[weakref.ref[Any], _Pending]] = {}
        self._lock = threading.RLock()
        self._info_type: type | None = None

    def _apply(self) -> None:
        from torch._functorch._aot_autograd import runtime_wrappers

        dispatch = getattr(runtime_wrappers, "AOTDispatchAutograd", None)
        post_compile = None if dispatch is None else vars(dispatch).get("post_compile")
        info_type = getattr(runtime_wrappers, "AutogradLazyBackwardCompileInfo", None)
        if not isinstance(post_compile, staticmethod) or not isinstance(info_type, type):
            return
        self._info_type = info_type
        original = post_compile.__func__
        signature = inspect.signature(original)
        hook = self

        @functools.wraps(original)
        def _post_compile(*args: Any, **kwargs: Any) -> Any:
            try:
                args, kwargs = hook._remember(signature, args, kwargs)
            except Exception:  # an unknown shape: torch's own lazy backward
                log.debug("a deferred backward was not kept", exc_info=True)
            return original(*args, **kwargs)

        self._replace(dispatch, "post_compile", staticmethod(_post_compile))

    def _stopped(self) -> None:
        with self._lock:
            self._pending = {}

    def _remember(
        self, signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Keep the call's deferred backward; returns the arguments to call torch with."""
        bound = signature.bind(*args, **kwargs)
        named = bound.arguments
        spec = None
        if "lazy_backward_info" in named:  # 2.11: the pieces as arguments
            parts = named
            compile_fn = getattr(named["aot_config"], "bw_compiler", None)
        elif len(named) == 1:  # newer: one compile spec
            spec = next(iter(named.values()))
            parts = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
            # 2.12's spec has no compiler of its own: its config's is read.
            compile_fn = (
                parts["bw_compiler"] if "bw_compiler" in parts else getattr(parts["aot_config"], "bw_compiler", None)
            )
        else:
            return args, kwargs
        info, aot_config = parts.get("lazy_backward_info"), parts["aot_config"]
        backend_id = getattr(aot_config, "precompile_backend_id", None)
        if (
            parts.get("compiled_bw_func") is not None
            or parts.get("try_save_cache_entry") is None
            or backend_id is None
            or compile_fn is None
            or self._info_type is None
            or not isinstance(info, self._info_type)
        ):
            return args, kwargs
        compiler = _OnceCompiler(compile_fn)
        if spec is not None and "bw_compiler" in parts:
            named[next(iter(named))] = dataclasses.replace(spec, bw_compiler=compiler)
        else:
            # 2.11 and 2.12 read the compiler from the config at backward time.
            aot_config = dataclasses.replace(aot_config, bw_compiler=compiler)
            if spec is not None:
                named[next(iter(named))] = dataclasses.replace(spec, aot_config=aot_config)
            else:
                named["aot_config"] = aot_config
        pending = _Pending(
            backend_id=backend_id,
            compiler=compiler,
            disable_amp=bool(parts["disable_amp"]),
            aot_config=aot_config,
            fw_metadata=parts["fw_metadata"],
            try_save_cache_entry=parts["try_save_cache_entry"],
        )
        key = id(info)

        def _dropped(_: Any) -> None:
            with self._lock:
                self._pending.pop(key, None)

        with self._lock:
            self._pending[key] = (weakref.ref(info, _dropped), pending)
        return bound.args, bound.kwargs

    def compile(self, backend_ids: Collection[str], in_process: bool) -> tuple[list[str], list[BackwardFailure]]:
        """Compile and record each kept backward whose backend id is in
        `backend_ids`; returns the ids compiled and those that failed."""
        with self._lock:
            chosen = [(key, ref(), p) for key, (ref, p) in self._pending.items() if p.backend_id in backend_ids]
        compiled, failed = [], []
        for key, info, pending in chosen:
            if info is None:
                continue
            if pending.compiler.compiled:
                # torch's backward call compiled it and recorded the backend
                # then: one missing now was taken out of PrecompileContext
                # after, and is saved missing, as torch saves it.
                with self._lock:
                    self._pending.pop(key, None)
                continue
            try:
                with _in_process() if in_process else contextlib.nullcontext():
                    _compile(info, pending)
            except Exception as e:
                log.debug("compiling the backward of %s at save failed", pending.backend_id, exc_info=True)
                failed.append(BackwardFailure(pending.backend_id, f"{type(e).__name__}: {e}"))
                continue
            compiled.append(pending.backend_id)
            with self._lock:
                self._pending.pop(key, None)
        return compiled, failed


pending_backwards = _PendingBackwards()


def _compile(info: Any, pending: _Pending) -> None:
    """Compile one deferred backward and record its graph, as torch's first backward call does."""
    context = info.saved_context
    if getattr(context, "ddp_optimizer_ctx", None) is not None:
        # DDPOptimizer hands out per-bucket metadata in backward order, one
        # bucket per backward call: compiling one here would take a bucket
        # the real backward needs.
        raise RuntimeError("a DDPOptimizer graph compiles its backward only when backward runs")

    def without_donated_buffers() -> None:
        # The variant torch compiles for a first backward that keeps its
        # graph (retain_graph=True): with no donated buffers, every later
        # backward call works, whichever way it is made, here and where it is
        # loaded. Only for a compile made here: a backward torch compiled
        # keeps the metadata it was compiled with.
        pending.fw_metadata.bw_donated_idxs = []
        saved_metadata = getattr(context, "fw_metadata", None)
        if saved_metadata is not None and hasattr(saved_metadata, "bw_donated_idxs"):
            saved_metadata.bw_donated_idxs = []

    autocast = torch._C._DisableAutocast if pending.disable_amp else contextlib.nullcontext
    start = time.perf_counter()
    with tracing(context), compile_context(info.saved_compile_context), autocast():
        compiled = pending.compiler(copy.deepcopy(info.bw_module), info.placeholder_list, without_donated_buffers)
        pending.try_save_cache_entry(compiled, info.bw_module, pending.fw_metadata, pending.aot_config)
    counters["precompile"]["backward_compiled_at_save"] += 1
    counters["precompile"]["backward_compile_at_save_ms"] += round((time.perf_counter() - start) * 1000)


def _in_process() -> contextlib.AbstractContextManager[Any]:
    """Inductor compiling in this thread, without its worker pools.

    At interpreter exit torch has shut its compile pools down (its own
    atexit hook; 2.11 keeps handing out the shut thread pool), so a compile
    that submits to one fails. `compile_threads` is not part of any cache
    key: the result is the same graph.
    """
    from torch._inductor import config

    patched: contextlib.AbstractContextManager[Any] = config.patch(compile_threads=1)
    return patched


def compile_pending(
    backend_ids: Collection[str], *, in_process: bool = False
) -> tuple[list[str], list[BackwardFailure]]:
    """Compile the deferred backwards of the graphs `backend_ids` names, so
    that torch records them; returns the ids compiled and the failures.

    `in_process` compiles without Inductor's worker pools, as a save at
    interpreter exit must.
    """
    if not backend_ids:
        return [], []
    return pending_backwards.compile(backend_ids, in_process)
