"""Compiled kernels: the C++ libraries and Triton autotuning results each graph loads, and torch's Triton cache dir."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import os
import threading
from typing import Any

from torch._inductor.triton_bundler import TritonBundler

from .patch import _Patch

# Torch writes this placeholder into bundled Triton json files and replaces it
# with the real cache directory when the bundle is emitted.
TRITON_REPLACE_BYTES: bytes = getattr(TritonBundler, "_REPLACE_BYTES", b"[REPLACE]")


def inductor_cache_dir() -> str:
    """The directory Inductor's code caches (C++ libraries, Python modules) use."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return cache_dir()


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


class _KernelCapture(_Patch):
    """Records which compiled C++ libraries each Inductor graph loaded.

    Inductor loads a graph's generated module with
    `PyCodeCache.load_by_key_path(graph.cache_key, ...)`, and that module's
    C++ kernels are built and loaded (through `CppCodeCache._load_library`)
    while the module executes. Attributing each library to the graph whose
    module is executing gives the exact set of binaries a graph needs, so a
    fresh machine can be given them instead of running the compiler.

    Torch versions: 2.11 and newer: no torch release records which libraries a
    graph loaded.
    Steps aside: never; there is nothing to detect. `_apply` reads
    `PyCodeCache.load_by_key_path` and `CppCodeCache._load_library` by name, so
    a torch without them fails at install (KeyError) rather than silently
    storing graphs without their libraries.
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

    Torch versions: 2.11 and newer: no torch release records where the results
    it read or wrote are.
    Steps aside: `_apply` replaces nothing (inactive) where `AutotuneCache` is
    missing or keeps results without its `save` and `_read` methods.
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

    def note(self, cache: Any, kernel_hash: Any) -> None:
        """Record `cache`'s result file under the Triton binary `kernel_hash`."""
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
            capture.note(cache, kwargs.get("triton_cache_hash", args[1] if len(args) > 1 else None))
            return result

        @functools.wraps(read)
        def read_result(cache: Any) -> Any:
            best = read(cache)
            if isinstance(best, dict):
                capture.note(cache, best.get("triton_cache_hash"))
            return best

        self._replace(AutotuneCache, "save", save_result)
        self._replace(AutotuneCache, "_read", read_result)


autotune_capture = _AutotuneCapture()


def _picklable_autotuner(autotuner: Any) -> Any:
    """A statically launched autotuner that pickles: launchers dropped.

    Once a kernel has run, its autotuner holds launchers (driver handles),
    and pickling it asserts. torch copies its autotuners before they run,
    but an FX-graph cache hit inside the compiling process hands out a bundle
    whose autotuners already ran. This copies one the way torch's bundler
    does, leaving the live one untouched.
    """
    kernel: Any = getattr(autotuner, "kernel", None)
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


def with_kernel_attrs(autotuner: Any, **attrs: Any) -> Any:
    """A copy of a static autotuner whose kernel, a shallow copy, has `attrs` set."""
    # By its attributes: the kernel's own copy protocol goes through
    # `__getstate__`, which refuses a kernel holding launchers.
    original = autotuner.kernel
    kernel = object.__new__(type(original))
    kernel.__dict__.update(vars(original))
    kernel.__dict__.update(attrs)
    return dataclasses.replace(autotuner, kernel=kernel)


def portable_static_autotuners(autotuners: list[Any], cache_dir: str) -> list[Any]:
    """Copies of `autotuners` whose kernel file is named relative to `cache_dir`.

    A static autotuner keeps the path of its kernel's source file, and a
    loading process looks for the kernel's autotuning result (`.best_config`)
    beside that path. Stored absolute, it names the saving host's Inductor
    dir: elsewhere the result is not found and every kernel with several
    configs is benchmarked again at its first launch (which also imports
    the compiler). Relative, the bytes are the same from any host.
    """
    from .. import kernels

    out = []
    for autotuner in autotuners:
        filename = getattr(getattr(autotuner, "kernel", None), "filename", None)
        rel = kernels.kernel_source_relpath(filename, cache_dir) if isinstance(filename, str) else None
        out.append(autotuner if rel is None else with_kernel_attrs(autotuner, filename=rel))
    return out


def local_static_autotuners(autotuners: list[Any], cache_dir: str) -> list[Any]:
    """`autotuners` with each kernel file named in this host's `cache_dir`.

    A relative name (see `portable_static_autotuners`) is joined to it. An
    absolute one, from a store written before names were relative, keeps its
    last two parts when they have Inductor's layout (`<name[1:3]>/<name>.py`).
    Any other name becomes None: Inductor then neither reads nor writes an
    autotuning result for that kernel (it benchmarks at the first launch, as
    with no result), so a stored name never makes it touch a path outside
    the cache dir.
    """
    from .. import kernels

    for autotuner in autotuners:
        kernel: Any = getattr(autotuner, "kernel", None)
        filename = getattr(kernel, "filename", None)
        if isinstance(filename, str) and filename:
            if os.path.isabs(filename):
                filename = "/".join(filename.rsplit("/", 2)[-2:])
            try:
                kernel.filename = os.path.join(cache_dir, kernels.validate_kernel_source_path(filename))
            except ValueError:
                kernel.filename = None
        _local_result_file(kernel)
    return autotuners


def _local_result_file(kernel: Any) -> None:
    """Point the kernel's autotuning-result writer beside its local source file.

    The writer (`save_cache_hook`, a bound `AutotuneCache.save`) is pickled
    with the file it writes, `<saving host's cache dir>/<xx>/<key>.best_config`:
    a kernel tuned at its first launch (coordinate descent, under
    max-autotune) wrote its winner there, outside this host's cache dir and
    the store. The file keeps its name beside the kernel's local source; a
    kernel with no local source, or a name of another shape, writes none.
    """
    cache: Any = getattr(getattr(kernel, "save_cache_hook", None), "__self__", None)
    local = getattr(cache, "local_cache", None)
    if not (isinstance(local, tuple) and len(local) == 2 and isinstance(local[1], str)):
        return
    from .. import kernels

    filename = getattr(kernel, "filename", None)
    if not (isinstance(filename, str) and filename):
        cache.local_cache = None
        return
    folder = os.path.dirname(filename)
    try:
        relpath = kernels.validate_autotune_path(f"{os.path.basename(folder)}/{os.path.basename(local[1])}")
    except ValueError:
        cache.local_cache = None
        return
    cache.local_cache = (local[0], os.path.join(os.path.dirname(folder), relpath))


def _make_result_picklable(result: Any) -> None:
    for side in ("compiled_fw", "compiled_bw"):
        graph: Any = getattr(getattr(result, side, None), "result", None)
        bundle = getattr(graph, "_triton_bundle", None)
        if bundle is not None:
            graph._triton_bundle = picklable_triton_bundle(bundle)


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
