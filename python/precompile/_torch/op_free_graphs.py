"""Graphs without a tensor op: compiled by Inductor so their entry can be bundled, or saved as torch's no-op call."""

from __future__ import annotations

import functools
import sys
import threading
from typing import Any

from .patch import _Patch

_COMPILE_FX = "torch._inductor.compile_fx"


class _OpFreeGraphs(_Patch):
    """An op-free graph under caching_precompile is compiled, not returned as a bound method.

    A graph whose only call is no tensor op (torchvision's
    `_log_api_usage_once` before a graph break, in every `torchvision.ops`
    function; the piece of a compiled training step that only returns its
    inputs before the optimizer step breaks the graph) reaches Inductor with
    no aten call. Inductor then returns the GraphModule's bound `forward`
    unless functorch's `bundled_autograd_cache` flag is set; but AOTAutograd
    bundles its cache entry whenever `should_bundle_autograd_cache()` holds,
    which `caching_precompile` alone makes true, and the bundle refuses
    anything but compiled output: the user's call raises `AssertionError:
    expected OutputCode, got <class 'method'>`, with torch's own store as
    with this one. While installed, such a graph is compiled with the flag
    set, as torch compiles it when the flag is on: a compiled graph that runs
    nothing, stored and loaded like any other. Graphs with an op, and AOT
    compiles, are compiled as before, their cache keys unchanged.

    `compile_fx` is the compiler itself, which a served warm start never
    imports (see `lean_config`): the wrap goes on when `torch.compile`'s
    Inductor backend is first called to compile a frame, or at once where
    something already imported it.

    Torch versions: 2.11 to 2.15 check only the flag.
    Steps aside: where the Inductor wrapper has no `__call__`, Inductor no
    `_compile_fx_inner`, or AOTAutograd no `should_bundle_autograd_cache`.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def _apply(self) -> None:
        import torch

        wrapper = getattr(torch, "_TorchCompileInductorWrapper", None)
        call = vars(wrapper).get("__call__") if isinstance(wrapper, type) else None
        if call is None:
            return
        if _COMPILE_FX in sys.modules:
            self._wrap_compile_fx()
            return

        @functools.wraps(call)
        def __call__(backend: Any, *args: Any, **kwargs: Any) -> Any:
            self._wrap_compile_fx()
            return call(backend, *args, **kwargs)

        self._replace(wrapper, "__call__", __call__)

    def _wrap_compile_fx(self) -> None:
        with self._lock:
            if any(name == "_compile_fx_inner" for _, name, _ in self._saved):
                return
            try:
                import torch._functorch.config as functorch_config
                import torch._inductor.compile_fx as compile_fx
                from torch._dynamo.utils import count_calls
                from torch._functorch._aot_autograd.autograd_cache import should_bundle_autograd_cache
                from torch._inductor.virtualized import V
            except ImportError:
                return
            original = vars(compile_fx).get("_compile_fx_inner")
            if original is None or not hasattr(functorch_config, "bundled_autograd_cache"):
                return

            @functools.wraps(original)
            def _compile_fx_inner(gm: Any, *args: Any, **kwargs: Any) -> Any:
                if (
                    should_bundle_autograd_cache()
                    and not functorch_config.bundled_autograd_cache
                    and not V.aot_compilation
                    and count_calls(gm.graph) == 0
                ):
                    with functorch_config.patch(bundled_autograd_cache=True):
                        return original(gm, *args, **kwargs)
                return original(gm, *args, **kwargs)

            self._replace(compile_fx, "_compile_fx_inner", _compile_fx_inner)


op_free_graphs = _OpFreeGraphs()


class _NoopGraphBackends(_Patch):
    """A graph that runs and returns nothing is saved as torch's no-op call, not dropped.

    Where every call of a graph goes unused (under dynamic shapes, a size
    check before a graph break: `if x.shape[-1] > n: print(...)` traces
    `size` and a comparison, then nothing reads them), torch 2.15 hands
    Dynamo `output_graph.noop_graph_call` without calling the backend, so no
    backend artifact is recorded. torch's own save then marks the code
    bypassed ("Backend not found"), and every start compiles it again, with
    torch's store as with this one. While installed, each backend id Dynamo
    gives that function is kept here as an eager artifact naming it; the save
    stores it (pickled by reference: no code travels), and a load installs
    the same function torch would have. torch's PrecompileContext is left as
    it is.

    Torch versions: 2.15 has `noop_graph_call`; 2.11 passes such a graph to
    the backend (Inductor compiles it, and its artifact is recorded).
    Steps aside: where `torch._dynamo.output_graph` has no `noop_graph_call`
    or `CompilePackage` no `_add_backend_id`.
    """

    def __init__(self) -> None:
        super().__init__()
        self.artifacts: dict[Any, Any] = {}

    def _apply(self) -> None:
        import torch._dynamo.output_graph as output_graph
        from torch._dynamo.package import CompilePackage
        from torch._dynamo.precompile_context import EagerCacheArtifact

        noop = getattr(output_graph, "noop_graph_call", None)
        original = vars(CompilePackage).get("_add_backend_id")
        if noop is None or original is None:
            return
        artifacts = self.artifacts

        @functools.wraps(original)
        def _add_backend_id(package: Any, backend_id: Any, backend: Any = None) -> None:
            original(package, backend_id, backend)
            if backend is noop:
                artifacts[backend_id] = EagerCacheArtifact(key=backend_id, content=noop)

        self._replace(CompilePackage, "_add_backend_id", _add_backend_id)

    def _stopped(self) -> None:
        self.artifacts.clear()


noop_graph_backends = _NoopGraphBackends()
