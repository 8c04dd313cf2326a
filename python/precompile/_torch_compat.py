"""The one place that touches torch internals.

Everything precompile needs from torch's private modules is imported or
patched here, so that a difference between torch releases is handled once
instead of by `if` checks scattered over the package. Supported: torch >= 2.11.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import importlib
import inspect
import logging
import os
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

import torch
import torch._dynamo.package as dynamo_package
from torch._dynamo.exc import PackageError
from torch._dynamo.package import (
    CompilePackage,
    DynamoStore,
    PrecompileCacheEntry,
    _DynamoCacheEntry,
)
from torch._dynamo.precompile_context import BackendCacheArtifact, PrecompileContext
from torch._dynamo.utils import counters
from torch._functorch._aot_autograd.aot_autograd_result import (
    BundledAOTAutogradCacheArtifact,
    BundledAOTAutogradResult,
    SerializedGraphModule,
)
from torch._inductor.output_code import CompiledFxGraph
from torch._inductor.triton_bundler import (
    TritonBundle,
    TritonBundler,
    TritonKernelArtifact,
    TritonKernelArtifacts,
)

from . import object_paths

__all__ = [
    "BackendCacheArtifact",
    "autotune_capture",
    "BundledAOTAutogradCacheArtifact",
    "BundledAOTAutogradResult",
    "CompilePackage",
    "CompiledFxGraph",
    "DynamoStore",
    "PrecompileCacheEntry",
    "PrecompileContext",
    "SerializedGraphModule",
    "TORCH_MARKS_PROBES",
    "TORCH_VERSION",
    "TRITON_REPLACE_BYTES",
    "TRITON_VERSION",
    "TritonBundle",
    "TritonKernelArtifact",
    "TritonKernelArtifacts",
    "_DynamoCacheEntry",
    "backend_capture",
    "backend_setup_gc",
    "bypassed_copy",
    "caching_precompile",
    "counters",
    "debug_info",
    "deferred_full_gc",
    "entry_source_location",
    "guard_evaluation",
    "guard_state_handoff",
    "guard_state_reducers",
    "script_function_type_guards",
    "served_entries",
    "guard_passes",
    "InstallHash",
    "in_process_kernel_loads",
    "install_hardening",
    "install_hashes",
    "put_triton_cache_file",
    "picklable_triton_bundle",
    "probe_load_marks",
    "inductor_cache_dir",
    "isa_probe_libraries",
    "kernel_capture",
    "lazy_kernel_templates",
    "module_alias_recorder",
    "named_class_guards",
    "record_for_mega_cache",
    "register_library",
    "set_caching_precompile",
    "source_id_from_fn",
    "swap_dynamo_cache",
    "torch_marks_loaded_probes",
    "triton_cache_dir",
    "unbuildable_guards",
    "unnamed_frames",
    "object_aliases",
    "alias_target",
    "comprehension_functions",
    "device_type_union",
]

log = logging.getLogger(__name__)

TORCH_VERSION: str = torch.__version__
# Torch writes this placeholder into bundled Triton json files and replaces it
# with the real cache directory when the bundle is emitted.
TRITON_REPLACE_BYTES: bytes = getattr(TritonBundler, "_REPLACE_BYTES", b"[REPLACE]")


def _triton_version() -> str | None:
    try:
        import triton
    except Exception:  # absent, or present but broken on this machine
        return None
    return getattr(triton, "__version__", None)


TRITON_VERSION: str | None = _triton_version()


def record_for_mega_cache(key: str, pickled_entry: bytes) -> None:
    """Record a pickled entry as torch's own DynamoCache does, so that
    `torch.compiler.save_cache_artifacts()` carries it.

    Newer torch records through `CacheArtifactRecorder`; older releases call
    `CacheArtifactManager.record_artifact` directly.
    """
    import torch.compiler._cache as cache

    kind = dynamo_package.PrecompileCacheArtifact.type()
    recorder = getattr(cache, "CacheArtifactRecorder", None)
    if recorder is not None:
        recorder(kind, key).record(pickled_entry)
    else:
        cache.CacheArtifactManager.record_artifact(kind, key, pickled_entry)


def debug_info(entries: dict[str, Any], backends: dict[Any, Any]) -> dict[str, Any]:
    """What torch's `PrecompileContext.save_to_dynamo_cache()` returns for these records."""
    return PrecompileContext.dump_debug_info(entries, backends)


def bypassed_copy(entry: _DynamoCacheEntry, bypass: set[int]) -> _DynamoCacheEntry:
    """`entry` with the codes at indices `bypass` marked bypassed.

    torch's own stitching sets `bypassed` on the live code entry; the live
    entry belongs to the compiling process (a later save would see the mark),
    so this copies instead.
    """
    if not bypass:
        return entry
    codes = [dataclasses.replace(code, bypassed=True) if i in bypass else code for i, code in enumerate(entry.codes)]
    return dataclasses.replace(entry, codes=codes)


def entry_source_location(entry: _DynamoCacheEntry) -> tuple[str | None, str | None, int | None]:
    """The compiled function's qualified name, source file and first line."""
    qualname = getattr(entry, "fn_name", None)
    line = getattr(entry, "fn_first_lineno", None)
    source_file = None
    for code in entry.codes:
        module = sys.modules.get(getattr(code, "python_module", ""))
        source_file = getattr(module, "__file__", None)
        if source_file:
            break
    try:
        line = int(line) if line is not None else None
    except (TypeError, ValueError):
        line = None
    return qualname, source_file, line


def caching_precompile() -> bool:
    """Whether Dynamo records and looks up precompile entries."""
    return bool(torch._dynamo.config.caching_precompile)


def set_caching_precompile(on: bool) -> None:
    torch._dynamo.config.caching_precompile = on


def inductor_cache_dir() -> str:
    """The directory Inductor's code caches (C++ libraries, Python modules) use."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return cache_dir()


def default_dynamo_dir() -> str:
    """Where torch's own DiskDynamoCache keeps its entries."""
    return os.path.join(inductor_cache_dir(), "dynamo")


def source_id_from_fn(fn: Callable[..., Any]) -> str:
    """The key torch's DynamoCache files a compiled function under."""
    return CompilePackage.source_id_from_fn(fn)


# Every method of torch's DynamoCache that reads or writes entries.
_DYNAMO_CACHE_METHODS = (
    "clear",
    "write",
    "_write_to_local_cache",
    "read",
    "save_cache_entry",
    "save_package",
    "load_cache_entry",
    "load_package",
    "save",
    "load",
    "load_and_install_package",
    "path_prefix",
)


def swap_dynamo_cache(new: Any) -> Any:
    """Make torch's DynamoCache object act as `new` (None: as itself again).

    Code that imported the object before the swap (`from
    torch._dynamo.package import DynamoCache`, as precompile_context and
    user code do) holds the object, not the name, so the object itself is
    changed: its entry methods become `new`'s, as instance attributes that
    shadow its class's. Returns the object.
    """
    cache = dynamo_package.DynamoCache
    for name in _DYNAMO_CACHE_METHODS:
        cache.__dict__.pop(name, None)
        if new is not None and hasattr(new, name):
            setattr(cache, name, getattr(new, name))
    return cache


def register_library(cache_class: str, key: str, path: str) -> bool:
    """Tell Inductor's C++ code cache that `key` is already built at `path`.

    `CppCodeCache.load_async` computes a kernel's key from its source and
    compiler flags and, for a key it has not seen in this process, runs the
    header precompile (a compiler run, even when the library exists) and a
    build check before loading. Seeding its per-process table with a loader
    for the stored library skips both. A machine whose flags differ computes
    another key, never looks at this one, and compiles as usual.
    """
    import torch._inductor.codecache as codecache

    cls = getattr(codecache, cache_class, None)
    table = getattr(cls, "cache", None)
    if cls is None or not isinstance(table, dict) or not hasattr(cls, "_load_library"):
        return False
    if key in table:
        return False
    lib: Any = None

    def load_fn() -> Any:
        nonlocal lib
        if lib is None:
            lib = cls._load_library(path, key)
        return lib

    table[key] = load_fn
    return True


class _Patch:
    """An adaptation of torch that holds while a store is installed.

    A subclass replaces attributes of torch's classes and modules in
    `_apply`, each through `_replace`, which keeps the original; `stop()`
    puts every original back, last replaced first. `_apply` may replace
    nothing (a torch that needs no adaptation, or one it does not know):
    the patch then stays inactive. Starting an active patch does nothing.
    """

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []

    @property
    def active(self) -> bool:
        return bool(self._saved)

    def start(self) -> None:
        if not self._saved:
            self._apply()

    def stop(self) -> None:
        while self._saved:
            owner, name, original = self._saved.pop()
            setattr(owner, name, original)
        self._stopped()

    def original(self, owner: Any, name: str) -> Any:
        """What `owner.name` was before this patch replaced it."""
        for saved_owner, saved_name, original in self._saved:
            if saved_owner is owner and saved_name == name:
                return original
        raise KeyError(name)

    def _apply(self) -> None:
        raise NotImplementedError

    def _stopped(self) -> None:
        """Drop what the patch kept while active."""

    def _replace(self, owner: Any, name: str, value: Any) -> Any:
        """Set `owner.name` to `value` (a class or module's own attribute,
        descriptor and all) and return the original."""
        original = vars(owner)[name]
        self._saved.append((owner, name, original))
        setattr(owner, name, value)
        return original


class _KernelCapture(_Patch):
    """Records which compiled C++ libraries each Inductor graph loaded.

    Inductor loads a graph's generated module with
    `PyCodeCache.load_by_key_path(graph.cache_key, ...)`, and that module's
    C++ kernels are built and loaded (through `CppCodeCache._load_library`)
    while the module executes. Attributing each library to the graph whose
    module is executing gives the exact set of binaries a graph needs, so a
    fresh machine can be given them instead of running the compiler.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        # graph key -> [(library path, code-cache key, code-cache class)]
        self._by_graph: dict[str, list[tuple[str, str, str]]] = {}
        self._current: contextvars.ContextVar[str | None] = contextvars.ContextVar("precompile_graph_key", default=None)

    def libraries_for(self, graph_key: str) -> list[tuple[str, str, str]]:
        with self._lock:
            return list(self._by_graph.get(graph_key, ()))

    def _record(self, path: str, key: str, cache_class: str) -> None:
        graph = self._current.get()
        if graph is None:
            return
        with self._lock:
            libs = self._by_graph.setdefault(graph, [])
            if (path, key, cache_class) not in libs:
                libs.append((path, key, cache_class))

    def _apply(self) -> None:
        from torch._inductor.codecache import CppCodeCache, PyCodeCache

        load_by_key_path = vars(PyCodeCache)["load_by_key_path"]
        load_library = vars(CppCodeCache)["_load_library"]
        capture = self

        @functools.wraps(load_by_key_path.__func__)
        def _load_by_key_path(cls: Any, key: str, *args: Any, **kwargs: Any) -> Any:
            token = capture._current.set(key)
            try:
                return load_by_key_path.__func__(cls, key, *args, **kwargs)
            finally:
                capture._current.reset(token)

        @functools.wraps(load_library.__func__)
        def _load_library(cls: Any, path: str, key: str) -> Any:
            result = load_library.__func__(cls, path, key)
            capture._record(os.path.abspath(path), key, cls.__name__)
            return result

        self._replace(PyCodeCache, "load_by_key_path", classmethod(_load_by_key_path))
        self._replace(CppCodeCache, "_load_library", classmethod(_load_library))


kernel_capture = _KernelCapture()


class _AutotuneCapture(_Patch):
    """Records where Inductor keeps each Triton kernel's autotuning result.

    A Triton kernel with several candidate configs is benchmarked on its
    first run, and the winner is written as a `.best_config` file beside the
    kernel's source in Inductor's cache dir; a later process reads it and
    benchmarks nothing. A fresh host has no such file: it benchmarks every
    such kernel again on its first call, and may pick another config than
    the host that saved the entry. Each result is recorded under the Triton
    cache hash of the winning binary, which the graph's Triton bundle lists,
    whether this process wrote it or read it, so a save can carry it.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        # Several kernels can compile to one binary (kernel files that differ
        # only outside the Triton function), each with a result file of its own.
        self._paths: dict[str, set[str]] = {}

    def paths_for(self, kernel_hash: str) -> list[str]:
        """The result files recorded for the Triton binary `kernel_hash` that exist."""
        with self._lock:
            paths = sorted(self._paths.get(kernel_hash, ()))
        return [p for p in paths if os.path.isfile(p)]

    def _note(self, cache: Any, kernel_hash: Any) -> None:
        local = getattr(cache, "local_cache", None)
        if isinstance(kernel_hash, str) and isinstance(local, tuple) and len(local) == 2 and isinstance(local[1], str):
            with self._lock:
                self._paths.setdefault(kernel_hash, set()).add(local[1])

    def _apply(self) -> None:
        try:
            from torch._inductor.runtime.autotune_cache import AutotuneCache
        except ImportError:
            return
        save = vars(AutotuneCache).get("save")
        read = vars(AutotuneCache).get("_read")
        if save is None or read is None:
            return  # a torch that keeps them another way
        capture = self

        @functools.wraps(save)
        def save_result(cache: Any, config: Any, time_taken_ns: Any, *args: Any, **kwargs: Any) -> Any:
            result = save(cache, config, time_taken_ns, *args, **kwargs)
            # save(config, time_taken_ns, found_by_coordesc=False, triton_cache_hash=None)
            capture._note(cache, kwargs.get("triton_cache_hash", args[1] if len(args) > 1 else None))
            return result

        @functools.wraps(read)
        def read_result(cache: Any) -> Any:
            best = read(cache)
            if isinstance(best, dict):
                capture._note(cache, best.get("triton_cache_hash"))
            return best

        self._replace(AutotuneCache, "save", save_result)
        self._replace(AutotuneCache, "_read", read_result)


autotune_capture = _AutotuneCapture()


def _isa_probe_sources() -> tuple[str, ...]:
    """The programs Inductor compiles to probe the CPU: the vector ISA probe
    and the feature probes (AVX-512 BF16 and VNNI, AMX) that
    `cpu_vec_isa`'s classes hold as `*_code` strings."""
    try:
        from torch._inductor import cpu_vec_isa
    except ImportError:
        return ()
    base = getattr(cpu_vec_isa, "VecISA", None)
    if not isinstance(base, type):
        return ()
    found: set[str] = set()
    for cls in vars(cpu_vec_isa).values():
        if isinstance(cls, type) and issubclass(cls, base):
            for klass in cls.__mro__:
                for name, value in vars(klass).items():
                    if name.endswith("_code") and isinstance(value, str) and value.strip():
                        found.add(value)
    return tuple(sorted(found))


def isa_probe_libraries(cache_dir: str) -> list[tuple[str, bool]]:
    """The CPU instruction-set probe libraries Inductor built in `cache_dir`,
    each with whether it is known to have loaded.

    Inductor picks a vector ISA among those the CPU reports (cpuid) by
    compiling a tiny probe library per candidate and loading it in a child
    process, and probes CPU features (AVX-512 BF16 and VNNI, AMX) the same
    way. The probe's cache key covers the compiler version, the ISA flags
    and the torch version, so a machine that finds the same key would build
    the same probe: shipping it spares that machine the compiler runs
    (seconds each). A probe that loaded carries a `.load_ok` marker where
    torch marks them (newer torch; on older torch `probe_load_marks` does
    while a store is installed), and a marked probe skips the child process.
    Where torch marks probes itself, only marked ones are listed: an
    unmarked one failed to load here. Elsewhere a probe is recognized by its
    source beside it (one of torch's probe programs) and listed, loaded or
    not; the loading machine loads an unloaded one in a child process. No
    other library has a marker or a probe's source.
    """
    sources = () if TORCH_MARKS_PROBES else _isa_probe_sources()
    found: list[tuple[str, bool]] = []
    try:
        subdirs = os.scandir(cache_dir)
    except FileNotFoundError:
        return []
    with subdirs:
        for sub in subdirs:
            if not sub.is_dir() or len(sub.name) != 2:
                continue
            with os.scandir(sub.path) as files:
                for f in files:
                    if not f.name.endswith(".so") or not f.is_file(follow_symlinks=False):
                        continue
                    loaded = os.path.isfile(f.path + ".load_ok")
                    probe = loaded if TORCH_MARKS_PROBES else _is_probe(f.path, sources)
                    if probe:
                        found.append((f.path, loaded))
    return sorted(found)


def _mentions(code: types.CodeType, literal: str) -> bool:
    return any(c == literal or (isinstance(c, types.CodeType) and _mentions(c, literal)) for c in code.co_consts)


def _torch_itself_marks_probes() -> bool:
    # Looked for in torch's own probe code: 2.13 already loads probes
    # through `VecISA._probe_load` but leaves no marker, so the method's
    # presence says nothing.
    try:
        from torch._inductor.cpu_vec_isa import VecISA
    except ImportError:
        return False
    for value in vars(VecISA).values():
        code = getattr(inspect.unwrap(getattr(value, "__func__", value)), "__code__", None)
        if isinstance(code, types.CodeType) and _mentions(code, ".load_ok"):
            return True
    return False


TORCH_MARKS_PROBES = _torch_itself_marks_probes()


def torch_marks_loaded_probes() -> bool:
    """Whether Inductor leaves `.load_ok` beside a probe that loaded and
    trusts it later: the versions that load a probe through
    `VecISA._probe_load` do; on older ones, `probe_load_marks` teaches it
    while a store is installed."""
    return TORCH_MARKS_PROBES or probe_load_marks.active


class _ProbeLoadCheck:
    """Stands in for the `subprocess` module inside torch's `cpu_vec_isa`.

    Everything is the real module's, except that `check_call` (torch 2.11)
    or `run` (2.13) of torch's probe-load program (`VecISA._avx_py_load`
    with a library path put in) trusts a `.load_ok` marker beside that
    library, and leaves one when the child process loaded it. Any other
    command runs as it would.
    """

    def __init__(self, module: Any, template: str) -> None:
        self._module = module
        self._head, _, self._tail = template.partition("__lib_path__")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def _probe(self, args: Any) -> str | None:
        if not isinstance(args, (list, tuple)) or len(args) != 3 or args[1] != "-c":
            return None
        program = args[2]
        if not isinstance(program, str) or len(program) <= len(self._head) + len(self._tail):
            return None
        if not (program.startswith(self._head) and program.endswith(self._tail)):
            return None
        path = program[len(self._head) : len(program) - len(self._tail)]
        return path if os.path.isabs(path) and "\n" not in path and '"' not in path else None

    def check_call(self, args: Any, *rest: Any, **kwargs: Any) -> int:
        library = self._probe(args)
        if library is None:
            return self._module.check_call(args, *rest, **kwargs)
        if os.path.isfile(library + ".load_ok"):
            return 0
        code = self._module.check_call(args, *rest, **kwargs)  # raises unless it loaded
        _mark_loaded(library)
        return code

    def run(self, args: Any, *rest: Any, **kwargs: Any) -> Any:
        library = self._probe(args)
        if library is None:
            return self._module.run(args, *rest, **kwargs)
        if os.path.isfile(library + ".load_ok"):
            return self._module.CompletedProcess(args, 0)
        done = self._module.run(args, *rest, **kwargs)  # check=True raises unless it loaded
        if done.returncode == 0:
            _mark_loaded(library)
        return done


def _mark_loaded(library: str) -> None:
    with contextlib.suppress(OSError):
        with open(library + ".load_ok", "w"):
            pass


class _ProbeLoadMarks(_Patch):
    """Probes that loaded once are not loaded in a child process again.

    Inductor checks each vector-ISA and CPU-feature probe library it built
    by loading it in a child Python process that imports torch, seconds on
    every process start, warm caches or not. Newer torch leaves a
    `.load_ok` marker beside a probe that loaded and trusts it from then
    on. On a torch that does not (2.11, 2.13), the same marker protocol holds
    while a store is installed: the verdict is torch's own child process,
    recorded once, and the store ships it with the probe (FORMAT §3.3
    `isa_loaded`), as it does on newer torch. A probe without a marker is
    loaded in the child process as before; one that fails gets none.
    """

    def _apply(self) -> None:
        import subprocess

        try:
            from torch._inductor import cpu_vec_isa
        except ImportError:
            return
        base = getattr(cpu_vec_isa, "VecISA", None)
        template = getattr(base, "_avx_py_load", None)
        if (
            TORCH_MARKS_PROBES
            or not isinstance(template, str)
            or template.count("__lib_path__") != 1
            or vars(cpu_vec_isa).get("subprocess") is not subprocess
        ):
            return  # torch marks probes itself, or loads them a way we do not know
        self._replace(cpu_vec_isa, "subprocess", _ProbeLoadCheck(subprocess, template))


probe_load_marks = _ProbeLoadMarks()


def _is_probe(library: str, sources: tuple[str, ...]) -> bool:
    if not sources:
        return False
    source = library[: -len(".so")] + ".cpp"
    longest = max(len(s) for s in sources)
    try:
        with open(source, encoding="utf-8") as f:
            return f.read(longest + 1) in sources
    except (OSError, UnicodeDecodeError):
        return False


class _GuardEvaluation(_Patch):
    """Routes torch's guard-string evaluation through `precompile.guards`.

    FxGraphCache and AOTAutogradCache keep several entries under one key and
    pick one by evaluating each entry's stored guard string with
    `ShapeEnv.evaluate_guards_expression`, which is `eval`. While installed,
    that method parses the string into an allowlisted expression instead; a
    string outside the allowlist is a miss (and a counter), so torch
    compiles rather than running it.
    """

    def _apply(self) -> None:
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        original = vars(ShapeEnv)["evaluate_guards_expression"]

        @functools.wraps(original)
        def evaluate_guards_expression(shape_env: Any, code: str, args: Any) -> bool:
            from . import guards

            values = list(args)
            if not all(type(v) in (int, float, bool) or isinstance(v, torch.Tensor) for v in values):
                # Symbolic arguments come from a live trace, not from disk.
                return original(shape_env, code, args)
            counters["precompile"]["guard_evaluations"] += 1
            try:
                return guards.evaluate_guard(code, values)
            except guards.GuardSyntaxError:
                counters["precompile"]["guards_refused"] += 1
                log.warning("refusing a stored guard expression", exc_info=True)
                return False

        self._replace(ShapeEnv, "evaluate_guards_expression", evaluate_guards_expression)


guard_evaluation = _GuardEvaluation()


def _picklable_autotuner(autotuner: Any) -> Any:
    """A statically launched autotuner that pickles: launchers dropped.

    Once a kernel has run, its autotuner holds launchers (driver handles),
    and pickling it asserts. torch copies its autotuners before they run,
    but an FX-graph cache hit inside the compiling process hands out a bundle
    whose autotuners already ran. This copies one the way torch's bundler
    does, leaving the live one untouched.
    """
    kernel = getattr(autotuner, "kernel", None)
    if not getattr(kernel, "launchers", None) or not hasattr(kernel, "prepare_for_pickle"):
        return autotuner
    import copy

    old = kernel.prepare_for_pickle()
    try:
        clean = copy.deepcopy(kernel)
    finally:
        kernel.restore_after_unpickle(old)
    if hasattr(clean, "prepare_for_caching"):
        clean.prepare_for_caching()
    clean._reload_kernel = None
    return dataclasses.replace(autotuner, kernel=clean)


def picklable_triton_bundle(bundle: Any) -> Any:
    """`bundle` with every static autotuner in picklable form."""
    autotuners = getattr(bundle, "static_autotuners", None)
    if not autotuners:
        return bundle
    clean = [_picklable_autotuner(a) for a in autotuners]
    if all(c is a for c, a in zip(clean, autotuners)):
        return bundle
    return dataclasses.replace(bundle, static_autotuners=clean)


def _make_result_picklable(result: Any) -> None:
    for side in ("compiled_fw", "compiled_bw"):
        graph = getattr(getattr(result, side, None), "result", None)
        bundle = getattr(graph, "_triton_bundle", None)
        if bundle is not None:
            graph._triton_bundle = picklable_triton_bundle(bundle)


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
            if result is not None and backend_id is not None:
                if PrecompileContext.serialize_artifact_by_key(backend_id) is None:
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
    """

    def __init__(self) -> None:
        super().__init__()
        self.on_failure: Any = None

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


# -- restoring stored entries and explaining misses --------------------------
def innermost_fn(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The function `torch.compile` wraps, under its decorators."""
    from torch._dynamo.eval_frame import innermost_fn as _innermost

    return _innermost(fn)


class _GuardStateHandoff(_Patch):
    """Hands `CompilePackage.install` the guard states already unpickled.

    The store checks that every stored guard state unpickles before it hands
    an entry to torch (`restore.check`); install() then unpickles each again,
    tenths of a second for a model with many guards. While installed, the
    state the check produced is given to install() for the same bytes object,
    once: torch receives a state no one else has used, as if it had
    unpickled it itself. Bytes it was not handed are unpickled as before.
    """

    # States checked but never installed (a later check failed) are dropped
    # beyond this many, oldest first.
    MAX_HELD = 64

    def __init__(self) -> None:
        super().__init__()
        self._held: dict[int, tuple[bytes, Any]] = {}
        self._lock = threading.Lock()

    def _apply(self) -> None:
        original = dynamo_package.load_guards_state
        handoff = self

        @functools.wraps(original)
        def load_guards_state(guards_state: bytes) -> Any:
            with handoff._lock:
                held = handoff._held.pop(id(guards_state), None)
            if held is not None and held[0] is guards_state:
                return held[1]
            return unpickle_guards_state(original, guards_state)

        self._replace(dynamo_package, "load_guards_state", load_guards_state)

    def _stopped(self) -> None:
        with self._lock:
            self._held.clear()

    def load(self, guards_state: bytes) -> Any:
        """Unpickle `guards_state` as install() does, keeping the result for it."""
        if not self.active:
            return dynamo_package.load_guards_state(guards_state)
        state = unpickle_guards_state(self.original(dynamo_package, "load_guards_state"), guards_state)
        with self._lock:
            while len(self._held) >= self.MAX_HELD:
                self._held.pop(next(iter(self._held)))
            self._held[id(guards_state)] = (guards_state, state)
        return state


guard_state_handoff = _GuardStateHandoff()


def load_guards_state(guards_state: bytes) -> Any:
    """Unpickle one guarded code's guard state, as `CompilePackage.install` does
    (and, while installed, keep it for install(); see `_GuardStateHandoff`)."""
    return guard_state_handoff.load(guards_state)


def recompiles_log() -> logging.Logger:
    """torch's `recompiles` artifact logger: `TORCH_LOGS=recompiles` shows it."""
    return torch._logging.getArtifactLogger("torch._dynamo.guards", "recompiles")


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


def _config_patches_are_thread_local() -> bool:
    """Whether a `torch._dynamo.config.patch` holds for the patching thread
    only (newer torch keeps each override in a ContextVar)."""
    entry = getattr(torch._dynamo.config, "_config", {}).get("caching_precompile")
    return isinstance(getattr(entry, "user_override", None), contextvars.ContextVar)


STORED_GUARDS_BUILT_ONCE = _config_patches_are_thread_local()


def _stored_guards_built_once() -> contextlib.AbstractContextManager[Any]:
    """Build a stored guard state's manager in one pass.

    With `caching_precompile` on, `CheckFunctionManager` builds every guard
    twice: once to evaluate its filter, which drops the guard kinds a saved
    state cannot hold (ID_MATCH, CLOSURE_MATCH, WEAKREF_ALIVE, DICT_VERSION),
    then again with the survivors. A stored state went through that filter
    when it was saved, and saving refuses those kinds outright, so the
    filter keeps every guard of it: the second pass alone builds the same
    manager (a test compares the two). Where config patches are per-thread
    the flag is lifted for this thread only, so no other thread's compile
    ever sees it off, and neither the filter nor its pass runs. Elsewhere
    (torch 2.11) the filter still runs, and the second pass reuses the
    first pass's build when the filter kept every guard (`guard_passes`).
    """
    if STORED_GUARDS_BUILT_ONCE:
        return torch._dynamo.config.patch(caching_precompile=False)
    return _reusing_filter_pass()


# The filter pass's build of the stored guard state this thread is loading.
_stored_build = threading.local()


@contextlib.contextmanager
def _reusing_filter_pass() -> Any:
    previous = getattr(_stored_build, "memo", None)
    _stored_build.memo = {}
    try:
        yield
    finally:
        _stored_build.memo = previous


class _StoredCodeWatch(_Patch):
    """Tells a listener when Dynamo compiles a frame the store installed code for.

    `CompilePackage.install` builds one guard manager per stored guarded code
    (through `package.load_guard_manager`, which `_UnbuildableGuards` wraps
    and which `record`s each manager here); Dynamo compiles a frame (through
    `convert_frame._compile`) only when none of them accepted it. Knowing
    both lets the listener evaluate the stored guards on the frame that
    missed and say which one failed, with torch's own verbose guard text.
    """

    def __init__(self) -> None:
        super().__init__()
        self._managers: dict[Any, list[Any]] = {}
        self.on_compile: Callable[[Any, dict[str, Any], list[Any]], None] | None = None

    def watch(self, on_compile: Callable[[Any, dict[str, Any], list[Any]], None]) -> None:
        """Start, telling `on_compile(code, f_locals, managers)` of each such compile."""
        self.on_compile = on_compile
        self.start()

    def record(self, code: Any, manager: Any) -> None:
        """Note a guard manager install() built for stored code of `code`."""
        if self.on_compile is not None:
            self._managers.setdefault(code, []).append(manager)

    def _apply(self) -> None:
        from torch._dynamo import convert_frame

        compile_frame = convert_frame._compile
        watch = self

        @functools.wraps(compile_frame)
        def _compile(code: Any, globals: Any, locals: Any, *args: Any, **kwargs: Any) -> Any:
            managers = watch._managers.get(code)
            if managers and watch.on_compile is not None:
                try:
                    watch.on_compile(code, locals, managers)
                except Exception:  # explaining must never break a compile
                    log.debug("explaining a stored-code compile failed", exc_info=True)
            return compile_frame(code, globals, locals, *args, **kwargs)

        self._replace(convert_frame, "_compile", _compile)

    def _stopped(self) -> None:
        # The next installation watches only what it installs: a code this
        # one loaded for, compiled under another store, is no stored-code miss.
        self.on_compile = None
        self._managers.clear()

    def forget(self, code: Any) -> None:
        self._managers.pop(code, None)


stored_code_watch = _StoredCodeWatch()


class _UnbuildableGuards(_Patch):
    """A stored variant whose guards cannot be built here refuses every call.

    `CompilePackage.install` builds each stored variant's guard manager when
    `torch.compile` wraps the function. A guard source that walks a live
    object saved by reference (a class attribute holding a registry, whose
    keys Dynamo guards by position: `list(dict.keys(...))[2]`) can fail to
    evaluate in a process that has not filled it yet; torch then abandons
    the whole install, and every frame and variant of the entry compiles.
    While installed, such a variant gets a guard manager that rejects every
    call and names the error: the entry's other variants install as stored,
    and a call only that variant would have served compiles, as on a guard
    failure (`precompile explain` names the variant and the error). Every
    stored variant's manager is built here in one pass
    (`_stored_guards_built_once`). Building
    it later, on a call, is not done: the rebuilt guards would take their
    expected values from whatever the live object holds then. A variant whose
    guard state found module or class data changed since the save (`_named_reads`) is
    refused the same way, before torch builds guards that would expect the
    new values.
    """

    def _apply(self) -> None:
        from torch._dynamo.guards import GuardManagerWrapper

        load_guard_manager = dynamo_package.load_guard_manager

        def refusing(why: str) -> Any:
            counters["precompile"]["variants_unbuildable"] += 1
            manager = GuardManagerWrapper()
            manager.root.add_lambda_guard(_refuse, [f"precompile: these stored guards {why}"], None)
            return manager

        def build(guards_state: Any, target_code: Any, *args: Any, **kwargs: Any) -> Any:
            changed = getattr(guards_state, "precompile_changed", None)
            if changed:
                return refusing(f"were not built: {'; '.join(changed[:3])}")
            if not served_entries.installing_now():
                return load_guard_manager(guards_state, target_code, *args, **kwargs)
            try:
                with _stored_guards_built_once():
                    return load_guard_manager(guards_state, target_code, *args, **kwargs)
            except Exception as e:  # noqa: BLE001 - whatever the build raised, the variant must not run
                log.debug("the guards of a stored variant of %s cannot be built", target_code.co_name, exc_info=True)
                return refusing(f"could not be built at install ({type(e).__name__}: {e})")

        # The one wrapper of torch's function: explain's watch is told of
        # every manager it returns for a store entry, refusing ones
        # included, so `explain` names why a refused variant did not serve.
        # Another install (a package a caller installs by hand) builds as
        # torch does and raises what torch raises; only stale module or
        # class data still refuses, since its guards would pass stale code.
        @functools.wraps(load_guard_manager)
        def _load_guard_manager(guards_state: Any, target_code: Any, *args: Any, **kwargs: Any) -> Any:
            manager = build(guards_state, target_code, *args, **kwargs)
            if served_entries.installing_now():
                stored_code_watch.record(target_code, manager)
            return manager

        self._replace(dynamo_package, "load_guard_manager", _load_guard_manager)


def _refuse(*_: Any) -> bool:
    return False


unbuildable_guards = _UnbuildableGuards()


def guard_failures(manager: Any, f_locals: dict[str, Any]) -> list[str]:
    """The guards of `manager` that `f_locals` fails, in torch's verbose words."""
    result = manager.check_verbose(f_locals)
    if result.result:
        return []
    return [str(p) for p in result.verbose_code_parts]


def changed_sources(dynamo_entry: Any) -> list[str]:
    """What of `dynamo_entry`'s source differs here: inlined source ranges, and
    generated codes (`_generated_code_changed`) of codes that install.

    The check `CompilePackage.initialize` makes (and raises on), made first,
    and the one torch cannot make for code without a source file. Raises
    where a module the entry names does not import.
    """
    changed = []
    for src in dynamo_entry.source_info.inlined_sources:
        module = importlib.import_module(src.module)
        if dynamo_package._hash_sourcelines(module, src.firstlineno, src.lastlineno) != src.checksum:
            changed.append(f"{src.module} lines {src.firstlineno}-{src.lastlineno}")
    for code_entry in dynamo_entry.codes:
        if not code_entry.bypassed and (why := _generated_code_changed(code_entry)) is not None:
            changed.append(why)
    return sorted(changed)


def _generated_code_changed(code_entry: Any) -> str | None:
    """Why `code_entry`'s generated code is not the one its path reaches here, or None.

    Only a code `exec` generated (file "<string>") is compared: a code from a
    source file has its source hashed. The stored code must be the live one,
    instruction for instruction, or its compiled variants were traced from
    another function.
    """
    stored = code_entry.python_code
    if not code_entry.code_source or not object_paths.generated(stored.co_filename):
        return None
    importlib.import_module(code_entry.python_module)
    path = f"{code_entry.python_module}.{code_entry.function_names[0]}"
    try:
        live = dynamo_package._lookup_code(code_entry)
    except Exception as e:
        return f"{path} is not found here ({type(e).__name__}: {e})"
    if dynamo_package.SerializedCode.from_code_object(live) != stored:
        return f"{path} generates other code here than when it was compiled"
    return None


class _SourcePickling(_Patch):
    """Guard sources that pickle into something their class can rebuild.

    Some torch releases (2.11) give every guard `Source` dataclass a
    `__reduce__` that passes all fields to the constructor, `init=False`
    ones included (`DefaultsSource.field`, `_name`): the guard state saves,
    then fails to unpickle (`TypeError: DefaultsSource.__init__() takes from
    3 to 4 positional arguments but 6 were given`), so the stored code of any
    model with such a guard (transformers' BertModel) can never load. While
    installed, such classes reduce to their `init` fields only; their
    `__post_init__` derives the rest, so the rebuilt source is equal. Found
    by a round trip, not a version check; classes that pickle correctly are
    left alone.
    """

    @staticmethod
    def _broken(kind: type) -> bool:
        import dataclasses

        if not dataclasses.is_dataclass(kind) or "__reduce__" not in kind.__dict__:
            return False
        fields = dataclasses.fields(kind)
        init = [f for f in fields if f.init]
        if len(init) == len(fields):
            return False
        # Ask the class's own reduce how many arguments it would pass, on a
        # bare instance (reduce only reads the fields).
        probe = object.__new__(kind)
        for f in fields:
            object.__setattr__(probe, f.name, None)
        try:
            args = kind.__dict__["__reduce__"](probe)[1]
        except Exception:  # noqa: BLE001 - a reduce we cannot probe is left alone
            return False
        return len(args) != len(init)

    def _apply(self) -> None:
        import dataclasses

        from torch._guards import Source

        pending = list(Source.__subclasses__())
        seen: set[type] = set()
        while pending:
            cls = pending.pop()
            if cls in seen:
                continue
            seen.add(cls)
            pending.extend(cls.__subclasses__())
            if not self._broken(cls):
                continue

            def __reduce__(self: Any) -> tuple[Any, ...]:
                return (type(self), tuple(getattr(self, f.name) for f in dataclasses.fields(self) if f.init))

            self._replace(cls, "__reduce__", __reduce__)


source_pickling = _SourcePickling()


class _UnboundGlobalNames(_Patch):
    """Fresh global names that skip the names a loaded entry bound.

    `install()` binds a stored code's globals (`__builtins_dict___0`, ...)
    under the names the saving process drew from Dynamo's per-process
    counter, resume functions (`__resume_at_20_1`) among them. Where Dynamo
    draws a name without looking at the scope (torch 2.11: `OutputGraph.
    install_global`, and the resume and comprehension functions the
    translator makes), a frame compiled after a load (a new shape, a guard
    failure, an entry stored without its main frame) can draw the same name
    and fail an assertion inside the user's call. While installed, a drawn
    name that is already bound is drawn again; torch releases that already
    skip bound names (`unique_id_unbound_in`) are left alone.
    """

    def _apply(self) -> None:
        import torch._dynamo.bytecode_transformation as bt
        from torch._dynamo.output_graph import OutputGraph

        if hasattr(bt, "unique_id_unbound_in"):
            return
        original = vars(OutputGraph)["install_global"]

        @functools.wraps(original)
        def install_global(self: Any, prefix: str, value: Any) -> str:
            name = _unbound(lambda: bt.unique_id(prefix), self.global_scope)
            self.install_global_unsafe(name, value)
            return name

        self._replace(OutputGraph, "install_global", install_global)

        from torch._dynamo import symbolic_convert

        drawn = vars(symbolic_convert).get("unique_id")
        if drawn is not bt.unique_id:
            return

        @functools.wraps(drawn)
        def unique_id(name: str, with_uuid: bool = False) -> str:
            # The translator binds what it names in its frame's globals, the
            # scope of the frame being traced.
            tx = getattr(getattr(symbolic_convert, "tls", None), "current_tx", None)
            scope = getattr(getattr(tx, "output", None), "global_scope", None)
            return _unbound(lambda: drawn(name, with_uuid), scope)

        self._replace(symbolic_convert, "unique_id", unique_id)


def _unbound(draw: Callable[[], str], scope: Any) -> str:
    """A name from `draw()` that `scope` (a dict, or None for no check) does not bind."""
    name = draw()
    while isinstance(scope, dict) and name in scope:
        name = draw()
    return name


unbound_global_names = _UnboundGlobalNames()


# ------------------------------------------------------------------ fresh-host costs
# What a host with empty caches pays before its first kernel launch, none of
# it a compile of the model: Triton's C stub libraries, hashes over whole
# installations, and Inductor's compile worker pool.


def triton_cache_dir() -> str | None:
    """Triton's kernel cache dir as Triton resolves it, or None without Triton."""
    try:
        from triton import knobs
    except ImportError:
        return None
    directory = getattr(getattr(knobs, "cache", None), "dir", None)
    return directory if isinstance(directory, str) and directory else None


def put_triton_cache_file(directory: str, filename: str, data: Any) -> bool:
    """Put `data` into Triton's cache as `directory`/`filename` (`directory`
    is the name Triton gave the entry's dir, which for a key it derives from
    the key), through Triton's configured cache manager class, unless a file
    is already there. Returns whether one was written."""
    from triton import knobs
    from triton.runtime.cache import FileCacheManager

    # get_cache_manager(key) builds `manager_class(dirname_of(key))`; the
    # stored name is that dir name already, so the class is built with it.
    manager = (knobs.cache.manager_class or FileCacheManager)(directory)
    if manager.get_file(filename) is not None:
        return False
    manager.put(bytes(data), filename, binary=True)
    return True


@contextlib.contextmanager
def in_process_kernel_loads() -> Any:
    """Load a stored graph's kernels in this process.

    `AsyncCompile.triton` starts Inductor's compile worker pool (one process
    per core, each importing torch) as soon as it is asked for a kernel, even
    one that only needs loading from Triton's cache. A stored backend has its
    kernels in the cache already, so its loads stay in this process and the
    pool is never started for them; a real compile later starts it as usual.
    """
    from torch._inductor import config as inductor_config

    with inductor_config.patch(compile_threads=1):
        yield


@dataclasses.dataclass(frozen=True)
class InstallHash:
    """A hash torch or Triton computes over its own installation, once per process.

    `files()` lists every file the hash reads (a superset is fine);
    `compute()` runs the original; `prime(value)` makes this process use
    `value` without hashing; `valid(value)` checks a memoized value's shape;
    `computed()` says whether this process has the value already.
    """

    name: str
    files: Callable[[], list[str]]
    compute: Callable[[], str]
    prime: Callable[[str], None]
    valid: Callable[[str], bool]
    computed: Callable[[], bool]


def _package_files(root: str, everything: bool) -> list[str]:
    """Files under `root`: all of them, or those in Python package dirs
    (a dir holding `__init__.py`), which is what a module walk can reach."""
    found = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
        if everything or directory == root or "__init__.py" in files:
            found += [os.path.join(directory, f) for f in sorted(files)]
    return found


def _torch_key_hash() -> InstallHash | None:
    try:
        from torch._inductor import codecache
    except ImportError:
        return None
    torch_key = getattr(codecache, "torch_key", None)
    root = getattr(codecache, "_TORCH_PATH", None)
    # Only a torch_key that can be prepopulated (`set`) is memoized.
    if torch_key is None or not hasattr(torch_key, "set") or not isinstance(root, str):
        return None

    def files() -> list[str]:
        # torch_key walks torch's modules and adds a few non-module files of
        # Inductor's: those live in Inductor's tree, taken whole.
        inductor = os.path.dirname(codecache.__file__)
        return sorted(set(_package_files(root, everything=False)) | set(_package_files(inductor, everything=True)))

    def prime(value: str) -> None:
        try:
            torch_key.set(bytes.fromhex(value))
        except AssertionError:
            pass  # already computed in this process

    def valid(value: str) -> bool:
        try:
            return len(bytes.fromhex(value)) >= 16
        except ValueError:
            return False

    # Every Inductor compile computes torch_key; a process that saves has it.
    return InstallHash("torch_key", files, lambda: torch_key().hex(), prime, valid, lambda: True)


def _triton_key_hash() -> InstallHash | None:
    try:
        import triton
        import triton.runtime.cache as triton_cache
    except ImportError:
        return None
    original = getattr(triton_cache, "triton_key", None)
    if original is None or not hasattr(original, "cache_info"):
        return None
    original = getattr(original, "_precompile_original", original)
    root = os.path.dirname(os.path.abspath(triton.__file__))
    version = str(getattr(triton, "__version__", ""))

    def prime(value: str) -> None:
        current = triton_cache.triton_key
        if getattr(current, "_precompile_original", None) is not None or current.cache_info().currsize:
            return  # primed already, or computed in this process

        @functools.cache
        def triton_key() -> str:
            return value

        triton_key._precompile_original = original  # type: ignore[attr-defined]
        # Every module that imported the function by name gets the primed
        # one; module dicts are read directly so lazy modules stay unloaded.
        for module in list(sys.modules.values()):
            namespace = getattr(module, "__dict__", None)
            if isinstance(namespace, dict) and namespace.get("triton_key") is current:
                namespace["triton_key"] = triton_key

    return InstallHash(
        "triton_key",
        lambda: _package_files(root, everything=True),
        original,
        prime,
        lambda value: value.startswith(version) and value.isascii() and len(value) < 1 << 16,
        lambda: bool(original.cache_info().currsize),
    )


def install_hashes(gpu: bool) -> list[InstallHash]:
    """The whole-install hashes a load will compute: for a GPU entry Triton's,
    and torch's (part of every Triton kernel's in-process cache key). A CPU
    entry's load computes neither (only a compile does), so priming one
    there would walk or hash an installation for nothing."""
    if not gpu:
        return []
    found = [_torch_key_hash(), _triton_key_hash()]
    return [h for h in found if h is not None]


class _LazyTemplate:
    """A jinja template compiled on first use, then used as itself."""

    __slots__ = ("_compile", "_lock", "_template")

    def __init__(self, compile: Callable[[], Any]) -> None:
        self._compile = compile
        self._template: Any = None
        self._lock = threading.Lock()

    def _get(self) -> Any:
        if self._template is None:
            with self._lock:
                if self._template is None:
                    self._template = self._compile()
        return self._template

    def __getattr__(self, name: str) -> Any:
        return getattr(self._get(), name)

    def __bool__(self) -> bool:
        return self._get() is not None

    def __repr__(self) -> str:
        return f"<lazy {self._template!r}>" if self._template is not None else "<lazy template, not compiled yet>"


class _LazyKernelTemplates(_Patch):
    """Inductor's kernel templates, compiled when a compile first renders one.

    Importing Inductor's kernel modules builds every Triton template (matmul,
    convolution, flex attention, ...) and compiles each with jinja: tenths of
    a second, paid by a process that only loads stored graphs, which render
    none. While a store is installed, templates built from then on compile on
    first use instead; what they render is the same, so a compile that uses
    them behaves as before.
    """

    def _apply(self) -> None:
        try:
            from torch._inductor.codegen.common import KernelTemplate
        except ImportError:
            return
        original = KernelTemplate.__dict__.get("_template_from_string")
        if not isinstance(original, staticmethod):
            return  # a torch whose templates are built another way
        function = original.__func__

        @functools.wraps(function)
        def _template_from_string(source: str) -> Any:
            return _LazyTemplate(lambda: function(source))

        self._replace(KernelTemplate, "_template_from_string", staticmethod(_template_from_string))


lazy_kernel_templates = _LazyKernelTemplates()


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


def _resolves_by_name(value: Any) -> bool:
    """Whether `value`'s module and qualified name import back to `value` itself,
    so pickle can carry it by reference (a local one never does)."""
    return _names(getattr(value, "__module__", None), getattr(value, "__qualname__", None), value)


def _names(module_name: Any, qualname: Any, value: Any) -> bool:
    """Whether `module_name`'s attribute path `qualname` is `value` in this process."""
    if not isinstance(module_name, str) or not isinstance(qualname, str) or "<locals>" in qualname:
        return False
    try:
        return _attribute_path(sys.modules.get(module_name), qualname) is value
    except AttributeError:
        return False


def _attribute_path(owner: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        owner = getattr(owner, part)
    return owner


def _named_class(value: Any) -> bool:
    """Whether `value` is a class that pickles by reference."""
    return isinstance(value, type) and _resolves_by_name(value)


class _NamedClassGuards(_Patch):
    """Serialize CLASS_MATCH guards on classes that are importable by name.

    torch refuses to serialize any CLASS_MATCH guard (an identity check on a
    class, e.g. transformers' encoder-decoders guard `type(self.config)`) and
    saves such a frame without compiled code, so no cache can serve it. For a
    class that pickles by reference the guard carries across processes
    exactly as TYPE_MATCH does, which torch does serialize: the loading
    process rebuilds it from the saved scope, where the class is the one its
    name imports, and checks identity against it. While installed, a guard
    list whose CLASS_MATCH guards are all on such classes is serialized;
    anything else (a local class, a CLASS_MATCH only derived from another
    guard) is refused as torch refuses it. No guard is dropped or weakened.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def _apply(self) -> None:
        from torch._dynamo.guards import CheckFunctionManager

        unsupported = getattr(CheckFunctionManager, "UNSUPPORTED_SERIALIZATION_GUARD_TYPES", None)
        original = CheckFunctionManager.__dict__.get("serialize_guards")
        if not isinstance(unsupported, tuple) or "CLASS_MATCH" not in unsupported or original is None:
            return  # a torch that serializes them already, or that we do not know
        lock = self._lock

        @functools.wraps(original)
        def serialize_guards(self: Any, builder: Any, sorted_guards: Any, *args: Any, **kwargs: Any) -> Any:
            if not _class_matches_are_named(builder, sorted_guards):
                return original(self, builder, sorted_guards, *args, **kwargs)
            with lock:
                kept = CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES
                CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES = tuple(
                    t for t in kept if t != "CLASS_MATCH"
                )
                try:
                    return original(self, builder, sorted_guards, *args, **kwargs)
                finally:
                    CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES = kept

        self._replace(CheckFunctionManager, "serialize_guards", serialize_guards)


def _class_matches_are_named(builder: Any, guards: Any) -> bool:
    """True when the list has CLASS_MATCH guards and every one is on a named
    class, and no other guard merely derives a CLASS_MATCH."""
    found = False
    for guard in guards:
        derived = tuple(guard.guard_types) if getattr(guard, "guard_types", None) else ()
        if guard.create_fn_name() == "CLASS_MATCH":
            try:
                value = builder.get(guard)
            except Exception:
                return False
            if not _named_class(value):
                return False
            found = True
        elif "CLASS_MATCH" in derived:
            return False
    return found


named_class_guards = _NamedClassGuards()


class _GuardPasses(_Patch):
    """`CheckFunctionManager`'s two guard passes, as one pass would build.

    With `caching_precompile` on, `CheckFunctionManager` builds the same
    `Guard` objects twice (a pass to evaluate its filter, then the real one).

    - A guard records a weak reference to the object it checks and asserts
      that a later record names the same object while the first is alive.
      A source that yields a new object on every evaluation (a property
      that returns a fresh view, as transformers' `config.per_layer_config`
      does on Llama-family models) then fails the second pass: torch 2.11
      raises AssertionError out of the user's call. While installed, each
      build starts with no recorded object, as a build without a filter
      pass does; the identity check still holds within a build. No guard is
      dropped or changed: the record is only export and debug information.
    - While a stored guard state loads on a torch whose config patches are
      global (see `_stored_guards_built_once`), the second pass is the
      first one's build when the filter kept every guard: the same guards,
      in the same order, for the same frame and scope. Otherwise it builds.
    """

    def _apply(self) -> None:
        from torch._dynamo.guards import CheckFunctionManager
        from torch._guards import Guard

        original = CheckFunctionManager.__dict__.get("build_guards")
        forget_objects = hasattr(Guard, "obj_weakref")
        if original is None or not (forget_objects or not STORED_GUARDS_BUILT_ONCE):
            return  # a torch that builds guards another way, or needs neither

        @functools.wraps(original)
        def build_guards(manager: Any, *args: Any, **kwargs: Any) -> Any:
            # (sorted_guards, existing_diff_guard_sources, f_code, output_graph,
            # save_guards); only the real pass passes guard_filter_fn.
            memo = getattr(_stored_build, "memo", None)
            if memo is not None and args and "guard_filter_fn" in kwargs:
                held = memo.pop("filter", None)
                # The same manager, guard objects and arguments: the same build.
                if held is not None and held[0] is manager and _identical(held[1], args):
                    return held[2]
            if forget_objects:
                for guard in args[0] if args else kwargs.get("sorted_guards", ()):
                    guard.obj_weakref = None
            result = original(manager, *args, **kwargs)
            if memo is not None and args and "guard_filter_fn" not in kwargs:
                memo["filter"] = (manager, args, result)
            return result

        self._replace(CheckFunctionManager, "build_guards", build_guards)


def _identical(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Two build_guards argument tuples naming the same objects, the guard
    lists (the first argument) element by element."""
    return (
        len(a) == len(b)
        and len(a[0]) == len(b[0])
        and all(x is y for x, y in zip(a[0], b[0]))
        and all(x is y for x, y in zip(a[1:], b[1:]))
    )


guard_passes = _GuardPasses()


class _GuardStateDumpErrors(_Patch):
    """A guard state that cannot be pickled bypasses the frame, never fails the call.

    torch 2.11 turns only an AttributeError from pickling a guard state
    into a package bypass; any other (`cannot pickle '_contextvars.ContextVar'
    object`, from an object a guard reaches) propagates out of the compile
    and fails the user's call, only because `caching_precompile` is on,
    which `install()` turns on. Newer torch bypasses on anything raised
    there. While installed, such an error bypasses the frame on every torch:
    it compiles and runs, and is saved without compiled code. The state
    returned is empty, and never saved: a bypassed entry keeps no guarded
    code (2.11 asserts a state exists after the compile).
    """

    def _apply(self) -> None:
        from torch._dynamo.guards import CheckFunctionManager

        original = vars(CheckFunctionManager).get("serialize_guards")
        if not callable(original):
            return

        @functools.wraps(original)
        def serialize_guards(self: Any, builder: Any, sorted_guards: Any, output_graph: Any) -> bytes:
            try:
                return original(self, builder, sorted_guards, output_graph)
            except PackageError:
                raise  # torch's own bypass
            except Exception as e:  # noqa: BLE001 - every other failure bypasses, as in newer torch
                output_graph.bypass_package(f"Guard evaluation failed: {type(e).__name__}: {e}")
                return b""

        self._replace(CheckFunctionManager, "serialize_guards", serialize_guards)


guard_state_dump_errors = _GuardStateDumpErrors()


class _GuardStateReducers(_Patch):
    """How the store saves what torch's guard-state pickler would not carry faithfully.

    A guard state pickles the frame's scope pruned to what the guards read,
    and the loading process rebuilds every guard on it; a guard's expected
    value is taken from that scope. While installed, one override of
    `GuardsStatePickler.reducer_override` asks each rule below in turn; the
    first that answers saves the object, and anything no rule answers is
    torch's. Each rule says why in its own docstring: `_function_by_value`,
    `_script_function_by_name`, `_unguarded_bystander`, `_dict_subclass_items`,
    `_named_reads`.
    """

    def _apply(self) -> None:
        from torch._dynamo.guards import CheckFunctionManager, GuardsStatePickler

        reduce = vars(GuardsStatePickler).get("reducer_override")
        serialize = vars(CheckFunctionManager).get("serialize_guards")
        if reduce is None or not callable(serialize):
            return
        rules = [rule for rule in (make() for make in _REDUCER_RULES) if rule is not None]

        @functools.wraps(reduce)
        def reducer_override(pickler: Any, obj: Any) -> Any:
            for rule in rules:
                reduced = rule(pickler, obj)
                if reduced is not None:
                    return reduced
            return reduce(pickler, obj)

        @functools.wraps(serialize)
        def serialize_guards(self: Any, builder: Any, sorted_guards: Any, *args: Any, **kwargs: Any) -> Any:
            # Which attributes of which objects the guards being saved read,
            # for the rules (`_named_reads`), from the guards' own sources.
            outer = getattr(_attributes_read, "current", None)
            _attributes_read.current = _attributes_of(builder, sorted_guards, args, kwargs)
            try:
                return serialize(self, builder, sorted_guards, *args, **kwargs)
            finally:
                _attributes_read.current = outer

        self._replace(GuardsStatePickler, "reducer_override", reducer_override)
        self._replace(CheckFunctionManager, "serialize_guards", serialize_guards)


# The attribute names each object's guards read, by the object's id, while
# `serialize_guards` saves a guard state on this thread.
_attributes_read = threading.local()


def _attributes_of(builder: Any, guards: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[int, set[str]]:
    """For each object some guard's source takes an attribute of (`G['config'].FLAG`,
    `list(dict.keys(G['m'].REGISTRY))[2]`), the names taken, by the object's id."""
    from torch._dynamo.source import AttrSource

    output_graph = args[0] if args else kwargs.get("output_graph")
    sources = [g.originating_source for g in guards]
    sources.extend(getattr(output_graph, "guard_on_key_order", ()) or ())
    found: dict[int, set[str]] = {}
    seen: set[int] = set()
    for source in sources:
        while source is not None and id(source) not in seen:
            seen.add(id(source))
            base = getattr(source, "base", None)
            if isinstance(source, AttrSource) and base is not None:
                try:
                    owner = builder.get(base)
                except Exception:  # noqa: BLE001 - a source the build could not read names nothing
                    owner = None
                if inspect.ismodule(owner) or isinstance(owner, type):
                    found.setdefault(id(owner), set()).add(source.member)
            source = base
    return found


_Rule = Callable[[Any, Any], Any]


def _read_by_guards(pickler: Any) -> Any:
    """The ids of the values some guard of this state reads (torch's record)."""
    return getattr(pickler, "guard_tree_values", None)


def _function_by_value() -> _Rule | None:
    """A function a guard walks through is saved by value.

    A function whose module and qualified name do not import back to it
    (every `functools.wraps` wrapper copies the wrapped function's names) is
    saved as torch's `_Missing` placeholder. Where a guard's source walks
    through such a function (transformers' stacked decorators: `L['func']
    .__closure__[0].cell_contents.__closure__[3].cell_contents == False`),
    rebuilding that guard on load raises on the placeholder, the install fails
    and the frame compiles: Mistral, Gemma 2 and Phi-3 on torch 2.11. Newer
    torch rebuilds such a function from its code (`_reduce_function_by_value`);
    on a torch without that, a function some guard reaches is saved as torch
    saves a nested function (code, names, defaults, closure, with the globals
    of the module that defined it) and rebuilt as it was
    (`_rebuild_guarded_function`); a function no guard reaches stays a
    placeholder.
    """
    from torch._dynamo.guards import GuardsStatePickler

    if hasattr(GuardsStatePickler, "_reduce_function_by_value"):
        return None  # torch rebuilds them itself

    def rule(pickler: Any, obj: Any) -> Any:
        read = _read_by_guards(pickler)
        if not inspect.isfunction(obj) or read is None or id(obj) not in read:
            return None
        if "<locals>" in obj.__qualname__ or _resolves_by_name(obj):
            return None
        module_name = obj.__globals__.get("__name__")
        module = sys.modules.get(module_name) if isinstance(module_name, str) else None
        if module is None or vars(module) is not obj.__globals__:
            return None
        return _rebuild_guarded_function, (
            obj.__code__,
            module_name,
            obj.__name__,
            obj.__qualname__,
            obj.__module__,
            obj.__defaults__,
            obj.__kwdefaults__,
            obj.__closure__,
        )

    return rule


def _script_function_by_name() -> _Rule | None:
    """A module-level TorchScript function is saved by its module and name.

    Neither torch's pickler nor pickle can save a `torch.jit.script`
    function; a module-level one is its module's attribute under its Python
    function's qualified name, so the loading process gets the same object
    back (`_import_script_function`, which refuses anything but a script
    function there). See `_ScriptFunctionTypeGuards` for its type guard.
    """
    script_function = getattr(torch.jit, "ScriptFunction", None)
    if not isinstance(script_function, type):
        return None

    def rule(pickler: Any, obj: Any) -> Any:
        if isinstance(obj, script_function):
            name = _script_function_name(obj)
            if name is not None:
                return _import_script_function, name
        return None

    return rule


def _unguarded_bystander() -> _Rule | None:
    """A context variable or lock no guard reads is left out of a guard state.

    transformers' `capture_outputs` keeps its collector in a module-level
    object that wraps a `ContextVar`; the frames that set it guard the
    object's type and the keys of its `__dict__`, so its guard state carries
    the object, and pickling that reaches the `ContextVar`. Neither a context
    variable, its token or context, nor a thread lock can be pickled, so torch
    bypassed every such frame on every version (on 2.11, any later variant of
    transformers' shared `wrapper`). A value no guard reads is never looked at
    when the guards are rebuilt: it is saved as torch's own `_Missing`
    placeholder, as torch saves unguarded streams and weak references. One
    that a guard does read is left to torch (a bypass).
    """
    import _thread

    from torch._dynamo import guards

    placeholder = getattr(guards, "_Missing", None)
    if placeholder is None:
        return None
    kinds = (contextvars.ContextVar, contextvars.Token, contextvars.Context, _thread.LockType, _thread.RLock)

    def rule(pickler: Any, obj: Any) -> Any:
        read = _read_by_guards(pickler)
        if isinstance(obj, kinds) and read is not None and id(obj) not in read:
            return placeholder, (f"unguarded {type(obj).__name__}",)
        return None

    return rule


_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class defined in Python, not in C


def _dict_subclass_items() -> _Rule | None:
    """A dict subclass that rewrites keys in `__setitem__` keeps its keys.

    Pickle rebuilds a dict subclass by setting each item through the class's
    `__setitem__`: transformers' `_CanRecordRegistry` turns every key into
    `str(key.__class__)`, so its saved keys all came back as `"<class 'str'>"`
    and every guard on them failed. Such a dict is saved as its class, its
    items and its attributes, and rebuilt with `dict.update`
    (`_rebuild_dict_subclass`). A subclass of another C mapping
    (`OrderedDict`, transformers' `ModelOutput`) is left to pickle.
    """

    def rule(pickler: Any, obj: Any) -> Any:
        kind = type(obj)
        if kind is dict or not isinstance(obj, dict) or kind.__setitem__ is dict.__setitem__:
            return None
        # Only where dict is the one C base: a C mapping such as OrderedDict
        # keeps its own order that `dict.update` would bypass.
        if any(not base.__flags__ & _HEAP_TYPE for base in kind.__mro__ if base not in (dict, object)):
            return None
        if not _resolves_by_name(kind):
            return None
        return _rebuild_dict_subclass, (kind, list(dict.items(obj)), getattr(obj, "__dict__", None) or None)

    return rule


def _named_reads() -> _Rule | None:
    """A module or class a guard walks into carries the data its guards read.

    torch saves a Python module or a class by name, so each guard through
    one (`G['config'].FLAG == 2`, `G['Config'].FLAG == 2`) would take its
    expected value from whatever the loading process holds when the entry is
    installed, not from what the compile saw: with `FLAG = 5` at install,
    the stored code, traced with 2, ran (torch's own store does the same).
    Such a module or class is saved by name together with the values of the
    data attributes (numbers, strings, `None`, and containers of data) the
    guards' sources take of it (`_attributes_of`). The loading process
    compares them with what the name imports there (`_import_checked`); a
    guard state whose module or class holds another value is not built
    (`_UnbuildableGuards`): that variant refuses every call, and a call only
    it would have served compiles. Functions, classes and other objects are
    not compared, and an attribute the loading process lacks is left to the
    guard build.
    """

    def rule(pickler: Any, obj: Any) -> Any:
        names = (getattr(_attributes_read, "current", None) or {}).get(id(obj))
        if not names:
            return None
        if inspect.ismodule(obj):
            module_name, qualname = obj.__name__, ""
        elif isinstance(obj, type) and _resolves_by_name(obj):
            module_name, qualname = obj.__module__, obj.__qualname__
        else:
            return None
        kept = {}
        for name in sorted(names):
            value = _lookup(obj, name)
            if value is not _NOTHING and _plain(value):
                kept[name] = value
        if not kept:
            return None
        return _import_checked, (module_name, qualname, kept)

    return rule


_REDUCER_RULES: tuple[Callable[[], _Rule | None], ...] = (
    _function_by_value,
    _script_function_by_name,
    _unguarded_bystander,
    _dict_subclass_items,
    _named_reads,
)

guard_state_reducers = _GuardStateReducers()


_PLAIN = (bool, int, float, complex, str, bytes, type(None))


def _plain(value: Any, depth: int = 0) -> bool:
    """Data whose equality says the guards built on it expect the same."""
    if isinstance(value, _PLAIN):
        return True
    if depth > 4:
        return False
    if isinstance(value, (tuple, list, set, frozenset)):
        return all(_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(_plain(k, depth + 1) and _plain(v, depth + 1) for k, v in value.items())
    return False


def _lookup(owner: Any, name: str) -> Any:
    """What `owner.name` finds, without running a descriptor or `__getattr__`."""
    for klass in owner.__mro__ if isinstance(owner, type) else (owner,):
        if name in vars(klass):
            return vars(klass)[name]
    return _NOTHING


_NOTHING = object()


def _same(saved: Any, live: Any) -> bool:
    """Whether `live` is data equal to `saved`, type, order and all."""
    if saved is live:
        return True
    if type(saved) is not type(live):
        return False
    if isinstance(saved, (tuple, list)):
        return len(saved) == len(live) and all(_same(a, b) for a, b in zip(saved, live))
    if isinstance(saved, dict):
        return list(saved) == list(live) and all(_same(v, live[k]) for k, v in saved.items())
    try:
        return bool(saved == live)
    except Exception:  # noqa: BLE001 - an answer that cannot be had is a difference
        return False


# What `_import_checked` found changed, per thread, while a guard state
# unpickles (`unpickle_guards_state`); None outside one.
_changed_reads = threading.local()


def unpickle_guards_state(unpickle: Callable[[bytes], Any], data: bytes) -> Any:
    """`unpickle(data)`, the state marked with the data found changed since the save."""
    outer = getattr(_changed_reads, "found", None)
    _changed_reads.found = found = []
    try:
        state = unpickle(data)
    finally:
        _changed_reads.found = outer
    if found:
        state.precompile_changed = found
    return state


def _import_checked(module_name: str, qualname: str, saved: dict[str, Any]) -> Any:
    """The module (`qualname` empty) or class `_named_reads` saved, by name, its
    guarded data compared with what it holds here."""
    owner = importlib.import_module(module_name)
    if qualname:
        owner = _attribute_path(owner, qualname)
    found = getattr(_changed_reads, "found", None)
    if found is not None:
        for name, value in saved.items():
            live = _lookup(owner, name)
            # One it lacks here is left to the guard build (Dynamo sets some
            # of its own marks on classes as it compiles).
            if live is not _NOTHING and not _same(value, live):
                found.append(
                    f"{qualname or module_name}.{name} is {repr(live)[:80]}, the compile saw {repr(value)[:80]}"
                )
    return owner


class _ScriptFunctionTypeGuards(_Patch):
    """The type guard of a module-level TorchScript function is serialized.

    Dynamo inlines a `torch.jit.script` function through the Python function
    it was scripted from and guards the global's type (`TYPE_MATCH` on
    `G['scaled_size_sqrt']` in DeBERTa-v2). torch takes the type for a local
    class (pybind names it `torch.jit.ScriptFunction`, a qualified name that
    differs from its name) and bypasses the frame on every version, so no
    cache can serve it. The type is torch's own, the same in every process,
    and the function itself is saved by name (`_script_function_by_name`):
    while installed, the mark is lifted from such a guard for the one call
    that serializes it. One that does not resolve by name is left to torch (a
    bypass).
    """

    def _apply(self) -> None:
        from torch._dynamo.guards import CheckFunctionManager

        script_function = getattr(torch.jit, "ScriptFunction", None)
        serialize = vars(CheckFunctionManager).get("serialize_guards")
        if not callable(serialize) or not isinstance(script_function, type):
            return

        @functools.wraps(serialize)
        def serialize_guards(self: Any, builder: Any, sorted_guards: Any, *args: Any, **kwargs: Any) -> Any:
            # The guards are this compile's own objects: the mark is lifted
            # for the one call that serializes them, then put back.
            lifted = [g for g in sorted_guards if _types_a_named_script_function(builder, g, script_function)]
            marks = [g._unserializable for g in lifted]
            for guard in lifted:
                guard._unserializable = None
            try:
                return serialize(self, builder, sorted_guards, *args, **kwargs)
            finally:
                for guard, mark in zip(lifted, marks):
                    guard._unserializable = mark

        self._replace(CheckFunctionManager, "serialize_guards", serialize_guards)


script_function_type_guards = _ScriptFunctionTypeGuards()


def _rebuild_dict_subclass(cls: type, items: list[tuple[Any, Any]], attributes: dict[str, Any] | None) -> Any:
    """A dict subclass `_dict_subclass_items` saved, its items as they were."""
    rebuilt = dict.__new__(cls)  # type: ignore[call-overload]
    dict.update(rebuilt, items)
    if attributes:
        vars(rebuilt).update(attributes)
    return rebuilt


def _types_a_named_script_function(builder: Any, guard: Any, script_function: type) -> bool:
    """Whether `guard` is a type guard torch marked unserializable only because
    it checks the type of a script function `_script_function_name` names."""
    if not getattr(guard, "_unserializable", None) or guard.create_fn_name() not in ("TYPE_MATCH", "BUILTIN_MATCH"):
        return False
    try:
        value = builder.get(guard)
    except Exception:  # noqa: BLE001 - a value that cannot be read stays torch's to refuse
        return False
    return type(value) is script_function and _script_function_name(value) is not None


def _script_function_name(fn: Any) -> tuple[str, str] | None:
    """The (module, qualified name) that import back to script function `fn`."""
    source = getattr(fn, "_torchdynamo_inline", None)  # the function it was scripted from
    module_name = getattr(source, "__module__", None)
    qualname = getattr(source, "__qualname__", None)
    return (module_name, qualname) if _names(module_name, qualname, fn) else None  # type: ignore[return-value]


def _import_script_function(module_name: str, qualname: str) -> Any:
    """The script function `_script_function_by_name` saved, from its module."""
    import torch

    fn = _attribute_path(importlib.import_module(module_name), qualname)
    if not isinstance(fn, torch.jit.ScriptFunction):
        raise TypeError(f"{module_name}.{qualname} is a {type(fn).__name__} now, not the saved TorchScript function")
    return fn


def _rebuild_guarded_function(
    code: types.CodeType,
    scope: str,
    name: str,
    qualname: str,
    module: Any,
    defaults: tuple[Any, ...] | None,
    kwdefaults: dict[str, Any] | None,
    closure: tuple[types.CellType, ...] | None,
) -> types.FunctionType:
    """A function `_function_by_value` saved, with the names it had.

    torch's `_unpickle_nested_function` passes the qualified name where
    `FunctionType` takes `__name__`, so a guard on `fn.__name__` (torch 2.13
    guards `func.__name__` in transformers' `deprecate_kwarg` wrapper) fails
    every call. `__module__` is the wrapped function's (functools.wraps
    copied it), `scope` the module whose globals the code runs in.
    """
    fn = types.FunctionType(code, importlib.import_module(scope).__dict__, name, defaults, closure)
    fn.__qualname__ = qualname
    fn.__module__ = module
    fn.__kwdefaults__ = kwdefaults
    return fn


class _ModuleAliasRecorder(_Patch):
    """Remembers which module each `___module_*` global Dynamo installs names.

    Dynamo deletes an installed global once the compiled code that uses it
    is dropped (its cleanup hook), e.g. when a later compile of the same code
    object (a shared decorator's `wrapper`) evicts it from the frame's cache.
    A save at exit would then find the alias unbound and could not carry it.
    Recording the module when the alias is installed keeps it for the save.
    """

    PREFIX = "___module_"

    def __init__(self) -> None:
        super().__init__()
        self.names: dict[str, str] = {}

    def _apply(self) -> None:
        from torch._dynamo.output_graph import OutputGraph

        original = OutputGraph.__dict__.get("install_global_by_id")
        if original is None:
            return
        recorder = self

        @functools.wraps(original)
        def install_global_by_id(self: Any, prefix: str, value: Any, *args: Any, **kwargs: Any) -> Any:
            name = original(self, prefix, value, *args, **kwargs)
            if isinstance(prefix, str) and prefix.startswith(recorder.PREFIX) and isinstance(name, str):
                path = alias_target(value)
                if path is not None:
                    recorder.names[name] = path
            return name

        self._replace(OutputGraph, "install_global_by_id", install_global_by_id)


module_alias_recorder = _ModuleAliasRecorder()


def alias_target(value: Any) -> str | None:
    """What a `___module_*` alias is stored as: its module's name, or `module:qualname`.

    Dynamo binds builtins and classes under such aliases as well (`iter`,
    `range`, `collections.deque`, to rebuild an iterator live at a graph
    break); those are named by the path that reaches them.
    """
    if isinstance(value, types.ModuleType):
        name = value.__name__
        return name if sys.modules.get(name) is value else None
    return object_paths.object_path(value)


class _ObjectAliases(_Patch):
    """install() binds the `module:qualname` aliases torch's table cannot.

    torch's install() imports every `import_sources` value as a module. An
    alias of a builtin or class (`alias_target`) is kept out of that table
    while torch installs, and bound afterwards through the package, so its
    uninstall() unbinds it with the rest.
    """

    def _apply(self) -> None:
        original = vars(CompilePackage)["install"]

        @functools.wraps(original)
        def install(package: Any, backends: Any) -> None:
            held = []
            for entry in package._codes.values():
                objects = {a: p for a, p in entry.import_sources.items() if object_paths.is_object_path(p)}
                if objects:
                    held.append((entry, entry.import_sources, objects))
                    entry.import_sources = {a: p for a, p in entry.import_sources.items() if a not in objects}
            try:
                original(package, backends)
            finally:
                for entry, sources, _ in held:
                    entry.import_sources = sources
            for entry, _, objects in held:
                module = sys.modules[entry.python_module]
                for alias, path in objects.items():
                    value = object_paths.resolve(path)
                    if value is None:
                        raise PackageError(f"{alias} names {path}, which is not found here")
                    package._install_global(module, alias, value)

        self._replace(CompilePackage, "install", install)


object_aliases = _ObjectAliases()


class _UnnamedFrames(_Patch):
    """Frames whose code torch's package cannot name: by their class, or unstored.

    Under torch.compile Dynamo compiles every frame it enters, code that no
    module attribute reaches included: a dataclass's generated `__init__`
    (file "<string>"), entered eagerly after a graph break in its caller, as
    transformers' model outputs are. torch's package raises PackageError for
    such a frame and the user's call fails. While installed, a generated method
    a class of its module holds is named through that class
    (`object_paths.owner_path`) and stored like any frame. Any other such frame
    compiles against an entry the package does not hold, so it runs as it
    would without caching_precompile and nothing of it is saved: a warm start
    compiles it again. Resume functions it creates stay out of the package
    with it. `on_unnamed(code, error)` is told once per such code and package.
    """

    def __init__(self) -> None:
        super().__init__()
        self.on_unnamed: Callable[[Any, BaseException], None] | None = None
        # Codes of frames compiled outside the package (their resume
        # functions included), per package; weak so a dropped package goes.
        self._detached: Any = None
        # Detached entries being compiled against, by id (they are unhashable).
        self._entries: dict[int, Any] = {}

    def _apply(self) -> None:
        import weakref

        code_context = CompilePackage.__dict__.get("code_context")
        add_resume = CompilePackage.__dict__.get("add_resume_function")
        if code_context is None or add_resume is None or not hasattr(CompilePackage, "_add_user_function"):
            return  # a torch whose package we do not know
        self._detached = weakref.WeakKeyDictionary()
        frames = self

        @contextlib.contextmanager
        def detached_context(package: Any, code: Any) -> Any:
            entry = dynamo_package._DynamoCodeCacheEntry(
                python_code=None,  # type: ignore[arg-type]  # never serialized
                python_module="",
                function_names=[],
                guarded_codes=[],
                import_sources={},
                backend_ids=[],
                code_source=None,
                install_to_global=False,
            )
            entry.bypassed = True
            frames._entries[id(entry)] = entry
            package._current_entry = entry
            try:
                yield
            finally:
                frames._entries.pop(id(entry), None)
                package._current_entry = None
                if hasattr(package, "_current_backend_ids"):
                    package._current_backend_ids = []
                # The frame's compiled graphs are reachable from no stored code.
                for backend_id in entry.backend_ids:
                    package._cached_backends.pop(backend_id, None)

        @functools.wraps(code_context)
        def wrapped_code_context(package: Any, code: Any) -> Any:
            detached = frames._detached.setdefault(package, set())
            if code in detached:
                return detached_context(package, code)
            if code not in package._codes and package._current_entry is None:
                try:
                    package._add_user_function(code)
                except PackageError as e:
                    owner = object_paths.owner_path(code)
                    if owner is not None:
                        module_name, path = owner
                        package._add_function(code, module_name, function_name=path, code_source="__code__")
                        return code_context(package, code)
                    detached.add(code)
                    if frames.on_unnamed is not None:
                        frames.on_unnamed(code, e)
                    return detached_context(package, code)
            return code_context(package, code)

        @functools.wraps(add_resume)
        def add_resume_function(package: Any, python_code: Any, *args: Any, **kwargs: Any) -> Any:
            detached = frames._detached.get(package)
            current = package._current_entry
            if detached is not None and current is not None and frames._entries.get(id(current)) is current:
                detached.add(python_code)
                package._resume_codes.add(python_code)
                return None
            return add_resume(package, python_code, *args, **kwargs)

        self._replace(CompilePackage, "code_context", wrapped_code_context)
        self._replace(CompilePackage, "add_resume_function", add_resume_function)

    def _stopped(self) -> None:
        self._detached = None
        self._entries = {}


unnamed_frames = _UnnamedFrames()


class _ComprehensionFunctions(_Patch):
    """A comprehension's graph-break function is part of the package.

    On Python 3.12 comprehensions run inline, and a graph break inside one
    makes Dynamo move the comprehension into a generated function
    (`__comprehension_<fn>_at_<line>`), which it marks to run uncompiled
    (`skip_code`) and binds in the frame's module. The compiled code calls it,
    but torch's package is not told of it, unlike a resume function: a fresh
    process has no such function (the code that calls it by name fails) or,
    where the code carries it as a constant, does not know to skip it, so
    Dynamo compiles it there, a frame the package cannot name. While
    installed, the function is registered as torch registers a resume
    function, under the name Dynamo bound it to; the package stores it
    without compiled variants, and install() binds it and skips it again, as
    the cold process did. Where Dynamo bound the bare code (it calls the
    function from a constant), it is registered without a name, as torch
    registers such a resume function. Found by the method, not a version:
    a torch without it is left alone.
    """

    def _apply(self) -> None:
        from torch._dynamo import symbolic_convert

        owner: Any = symbolic_convert.InstructionTranslatorBase
        if "_build_comprehension_fn" not in vars(owner):
            try:
                owner = importlib.import_module("torch._dynamo.comprehension_graph_break")
            except ImportError:
                return
            if "_build_comprehension_fn" not in vars(owner):
                return
        original = vars(owner)["_build_comprehension_fn"]

        @functools.wraps(original)
        def build(tx: Any, *args: Any, **kwargs: Any) -> Any:
            new_code, fn_name = original(tx, *args, **kwargs)
            package = getattr(tx, "package", None)
            if package is not None:
                bound = tx.output.global_scope.get(fn_name)
                # A function (or, for one with free variables, a factory
                # torch's install() builds again) is stored under its name;
                # a bare code object travels in the calling code itself.
                name = None if isinstance(bound, types.CodeType) else fn_name
                package.add_resume_function(new_code, tx.f_globals["__name__"], name)
            return new_code, fn_name

        self._replace(owner, "_build_comprehension_fn", build)


comprehension_functions = _ComprehensionFunctions()


class _DeviceTypeUnion(_Patch):
    """A package's device stays the accelerator once any frame named one.

    Some torch versions (2.11) keep only the device of the last compiled
    frame: a graph break whose resume frame computes on the CPU then saves a
    GPU function as a "cpu" entry, and the store would ship it without
    Triton's stubs and torch would skip its GPU compatibility check. Newer
    torch accumulates every frame's device; this gives older ones the same
    result. Where the package keeps no single `_device_type`, nothing changes.
    """

    def _apply(self) -> None:
        original = CompilePackage.__dict__.get("update_device_type")
        if original is None:
            return

        @functools.wraps(original)
        def update_device_type(package: Any, graph: Any) -> None:
            before = getattr(package, "_device_type", None)
            original(package, graph)
            if isinstance(before, str) and before != "cpu" and getattr(package, "_device_type", None) == "cpu":
                package._device_type = before

        self._replace(CompilePackage, "update_device_type", update_device_type)


device_type_union = _DeviceTypeUnion()
