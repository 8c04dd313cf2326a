"""A cached graph's imports served by the runtime parts it uses, not the compiler they live in."""

from __future__ import annotations

import builtins
import contextlib
import functools
import importlib
import importlib.util
import re
import sys
import threading
import types
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .patch import _Patch, source_block

_SELECT_ALGORITHM = "torch._inductor.select_algorithm"
_TRITON_HEURISTICS = "torch._inductor.runtime.triton_heuristics"

# Extern kernels that Inductor registers as torch's own public function of
# the same name (`ExternKernelChoice(torch.mm, ...)`): `extern_kernels.mm` is
# `torch.mm`. tests/test_lean_start.py checks each against the registry.
TORCH_EXTERN_KERNELS = frozenset(
    {
        "_grouped_mm",
        "_int_mm",
        "_scaled_grouped_mm",
        "_scaled_mm",
        "_sparse_semi_structured_mm",
        "_weight_int8pack_mm",
        "addmm",
        "baddbmm",
        "bmm",
        "convolution",
        "mm",
    }
)


class ExternKernels:
    """Stands for `select_algorithm.extern_kernels` in a loaded graph's code.

    A name of `TORCH_EXTERN_KERNELS` is torch's function while
    `select_algorithm` is not imported; any other name, or any name once it
    is, is looked up in the real namespace (importing it if need be).
    """

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        real = sys.modules.get(_SELECT_ALGORITHM)
        if real is None and name in TORCH_EXTERN_KERNELS:
            import torch

            value = getattr(torch, name)
        else:
            if real is None:
                real = importlib.import_module(_SELECT_ALGORITHM)
            value = getattr(real.extern_kernels, name)
        # Inductor never rebinds a registered name, so the first answer holds.
        setattr(self, name, value)
        return value


extern_kernels = ExternKernels()


class _DebugFlags:
    """Stands for `torch._inductor.debug`, as `torch._inductor.debug`, until
    the module is imported.

    A loaded graph's every call reads `torch._inductor.debug.RECORD_GRAPH_EXECUTION`
    (and `GRAPH_EXECUTION_ORDER`): an attribute the package has only once
    something imported the module, which loads the IR and the scheduler.
    The package answers `debug` with the module itself once it is in
    `sys.modules` (even while it is still importing, as Python would), and
    with this stand-in before: reads of the flags get their initial values
    (`_DEBUG_FLAGS`, checked against the module's source), which only the
    module's own functions change; any other name, and any write, imports
    the real module and goes to it.
    """

    _flags: dict[str, Any]

    def __init__(self, flags: dict[str, Any]) -> None:
        object.__setattr__(self, "_flags", flags)

    def __getattr__(self, name: str) -> Any:
        real = sys.modules.get("torch._inductor.debug")
        if real is None and name in self._flags:
            return self._flags[name]
        return getattr(real or importlib.import_module("torch._inductor.debug"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(
            sys.modules.get("torch._inductor.debug") or importlib.import_module("torch._inductor.debug"), name, value
        )


# The flags a graph's call reads, with the value `torch._inductor.debug`
# gives them at import (as its source must read for the stand-in to be used).
_DEBUG_FLAGS = {"RECORD_GRAPH_EXECUTION": False, "GRAPH_EXECUTION_ORDER": None, "GRAPH_COMPILE_IDS": None}


def _module_source(module: str) -> str:
    """`module`'s source text, read from its file without importing it; '' if none."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return ""
    try:
        with open(spec.origin, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


class _UnloadedGraphLowering:
    """`GraphLowering` as seen before `torch._inductor.graph` is imported:
    nothing can have set its `save_output_code` hook yet."""

    save_output_code = None


def _source_has(module: str, *needles: str) -> bool:
    """Whether `module`'s source file (read, not imported) holds every needle."""
    source = _module_source(module)
    return bool(source) and all(n in source for n in needles)


def _stand_ins() -> dict[str, dict[str, Any]]:
    """Module → {name: what `from module import name` gets} for this torch;
    an entry only where the source says the stand-in is what torch would give."""
    from torch._inductor import utils

    served: dict[str, dict[str, Any]] = {}
    if _source_has(
        _SELECT_ALGORITHM, "\nextern_kernels = KernelNamespace()\n", "setattr(extern_kernels, name, kernel)"
    ):
        served[_SELECT_ALGORITHM] = {"extern_kernels": extern_kernels}
    if hasattr(utils, "_align") and _source_has(
        "torch._inductor.codegen.memory_planning", "from ..utils import _align,"
    ):
        served["torch._inductor.codegen.memory_planning"] = {"_align": utils._align}
    compile_fx = source_block("torch._inductor.compile_fx", r"^from \.utils import \(.*?\)")
    if hasattr(utils, "clone_preserve_strides") and compile_fx and ",clone_preserve_strides," in compile_fx:
        served["torch._inductor.compile_fx"] = {"clone_preserve_strides": utils.clone_preserve_strides}
    graph = _module_source("torch._inductor.graph")
    if "class GraphLowering(" in graph and re.search(r"^    save_output_code: .* = None$", graph, re.M):
        served["torch._inductor.graph"] = {"GraphLowering": _UnloadedGraphLowering}
    return served


# Stand-ins that are not the runtime object itself, and the one module whose
# import may get each: any other importer in the window (`compile_fx`, first
# imported while a cached graph is served, binds `GraphLowering` at module
# level and compiles with it later) gets the real module.
_ONLY_FOR = {"torch._inductor.graph": "torch._inductor.codecache"}


class _LeanCachedGraphImports(_Patch):
    """A cached graph loads without importing the compiler.

    Inductor's generated code starts with imports of the compiler modules
    that define what it calls (`from torch._inductor.select_algorithm
    import extern_kernels`, `from torch._inductor.codegen.memory_planning
    import _align`), and serving a cached graph reads one class attribute
    of `torch._inductor.graph.GraphLowering`. Each import brings in the
    whole compiler (lowerings, autotuning, code generators, the scheduler)
    to a process that only runs stored graphs. While installed, and only
    inside `FxGraphCache.cache_hit_post_compile` and only while the module
    is not imported yet, those `from` imports get the runtime part itself:
    `extern_kernels` answers with the torch function Inductor registers
    under that name (and imports the real namespace for any other name),
    `_align` is `torch._inductor.utils._align` (which `memory_planning`
    re-exports), and `GraphLowering.save_output_code` is None (nothing can
    have set it; only for `cache_hit_post_compile`'s own import: a module
    first imported in the window, such as `compile_fx`, gets the real class).
    Any other import, in any thread, is Python's own.
    A Triton kernel benchmarked at its first launch (`maybe_clone_args`)
    imports `clone_preserve_strides` from `compile_fx`, which re-exports
    it from `torch._inductor.utils`: inside that method, the same window
    serves it from `utils`.

    Torch versions: 2.11 and newer.
    Steps aside: `_apply` replaces nothing where `cache_hit_post_compile` is
    not a staticmethod or no import is known to be servable; each stand-in
    is used only where the module's source shows it is the same object.
    """

    def __init__(self) -> None:
        super().__init__()
        self._served: dict[str, dict[str, Any]] = {}
        self._local = threading.local()
        self._lock = threading.Lock()
        self._windows = 0
        self._python_import: Any = None
        self._debug_stand_in: tuple[Any, str, Any] | None = None
        # One bound method, so that `builtins.__import__ is self._hook` holds.
        self._hook = self._import

    def _apply(self) -> None:
        from torch._inductor.codecache import FxGraphCache

        post = vars(FxGraphCache).get("cache_hit_post_compile")
        if not isinstance(post, staticmethod):
            return
        served = _stand_ins()
        if not served:
            return
        self._served = served
        self._stand_in_debug()
        original = post.__func__
        lean = self

        @functools.wraps(original)
        def cache_hit_post_compile(*args: Any, **kwargs: Any) -> Any:
            with lean._window():
                return original(*args, **kwargs)

        self._replace(FxGraphCache, "cache_hit_post_compile", staticmethod(cache_hit_post_compile))
        self._lean_autotune_args()

    def _lean_autotune_args(self) -> None:
        # A Triton kernel benchmarked at its first launch clones its in-place
        # arguments with a helper it imports from `compile_fx` (the compiler).
        # Applied once a kernel's code imports Triton's runtime: a CPU-only
        # start never does.
        if "torch._inductor.compile_fx" not in self._served or importlib.util.find_spec(_TRITON_HEURISTICS) is None:
            return
        self._after_import(_TRITON_HEURISTICS, self._lean_clone_args)

    def _lean_clone_args(self, triton_heuristics: types.ModuleType) -> None:
        CachingAutotuner = getattr(triton_heuristics, "CachingAutotuner", None)
        if not isinstance(CachingAutotuner, type):
            return
        original = vars(CachingAutotuner).get("maybe_clone_args")
        if not callable(original):
            return
        lean = self

        @functools.wraps(original)
        def maybe_clone_args(*args: Any, **kwargs: Any) -> Any:
            with lean._window():
                return original(*args, **kwargs)

        self._replace(CachingAutotuner, "maybe_clone_args", maybe_clone_args)

    @contextlib.contextmanager
    def _window(self) -> Iterator[None]:
        # `builtins.__import__` is process-wide: it is ours only while some
        # thread is in a window, and serves only the threads that are.
        with self._lock:
            if self._windows == 0:
                self._python_import = builtins.__import__
                builtins.__import__ = self._hook
            self._windows += 1
        depth = getattr(self._local, "depth", 0)
        self._local.depth = depth + 1
        try:
            yield
        finally:
            self._local.depth = depth
            with self._lock:
                self._windows -= 1
                # `_python_import` is kept: a thread may be inside `_import` still.
                if self._windows == 0 and builtins.__import__ is self._hook:
                    builtins.__import__ = self._python_import

    def _import(
        self,
        name: str,
        globals: Mapping[str, object] | None = None,
        locals: Mapping[str, object] | None = None,
        fromlist: Sequence[str] | None = (),
        level: int = 0,
    ) -> types.ModuleType:
        python_import = self._python_import
        in_window: int = getattr(self._local, "depth", 0)
        if fromlist and in_window:
            module = self._serve(name, globals, fromlist, level)
            if module is not None:
                return module
        imported: types.ModuleType = python_import(name, globals, locals, fromlist, level)
        return imported

    def _serve(
        self, name: str, globals: Mapping[str, object] | None, fromlist: Sequence[str], level: int
    ) -> types.ModuleType | None:
        if level:
            package = str((globals or {}).get("__package__") or "")
            if level != 1 or not package:
                return None
            name = f"{package}.{name}"
        names = self._served.get(name)
        if names is None or name in sys.modules or not set(fromlist) <= names.keys():
            return None
        importer = _ONLY_FOR.get(name)
        if importer is not None and (globals or {}).get("__name__") != importer:
            return None
        module = types.ModuleType(name, "Runtime parts served before the module is imported.")
        for attr in fromlist:
            setattr(module, attr, names[attr])
        return module

    def _stand_in_debug(self) -> None:
        import torch._inductor as inductor

        # Only a package without a module `__getattr__` of its own and
        # without the module imported; only where the source says what the
        # flags start as.
        if "torch._inductor.debug" in sys.modules or "debug" in vars(inductor) or "__getattr__" in vars(inductor):
            return
        source = _module_source("torch._inductor.debug")
        for name, value in _DEBUG_FLAGS.items():
            if len(re.findall(rf"^{name}\b.*=", source, re.M)) != 1 or not re.search(
                rf"^{name}: .* = {value}$", source, re.M
            ):
                return
        stand_in = _DebugFlags(dict(_DEBUG_FLAGS))

        def __getattr__(name: str) -> Any:
            if name == "debug":
                # Importing the module binds it on the package: from then on
                # this is not called.
                return sys.modules.get("torch._inductor.debug") or stand_in
            raise AttributeError(f"module 'torch._inductor' has no attribute {name!r}")

        vars(inductor)["__getattr__"] = __getattr__
        self._debug_stand_in = (inductor, "__getattr__", __getattr__)

    def _stopped(self) -> None:
        self._served = {}
        stand_in = self._debug_stand_in
        # Graphs loaded while installed read the flags on every call, after
        # `uninstall()` too: the package's `__getattr__` stays until the real
        # module is imported (from then on it is never called).
        if stand_in is not None and "torch._inductor.debug" in sys.modules:
            owner, name, value = stand_in
            if vars(owner).get(name) is value:
                delattr(owner, name)
            self._debug_stand_in = None


lean_cached_graph_imports = _LeanCachedGraphImports()
