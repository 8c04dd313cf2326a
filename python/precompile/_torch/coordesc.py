"""Coordinate descent's winners: kept where a kernel was tuned, stored with its graph, launched at load as they are."""

from __future__ import annotations

import contextvars
import copy
import dataclasses
import functools
import importlib.util
import os
import threading
import types
from collections.abc import Callable, Hashable
from typing import Any

from torch._dynamo.utils import counters

from .kernels import TRITON_REPLACE_BYTES, autotune_capture, with_kernel_attrs
from .patch import _Patch

_TRITON_HEURISTICS = "torch._inductor.runtime.triton_heuristics"

# The attribute a stored static autotuner's kernel carries its winner in:
# `(config, compile result or None)`. None: the winner is one of the kernel's
# own compile results (coordinate descent kept a candidate). Documented in
# docs/FORMAT.md (`static_autotuners`).
WINNER_ATTR = "_precompile_coordesc_winner"
# Where a loaded kernel keeps the served winner's config key, for its first launch.
_SERVED_ATTR = "_precompile_coordesc_served"


@dataclasses.dataclass(frozen=True)
class _Winner:
    config: Any
    # The compile result tuning made for `config`; None where tuning kept a
    # config it did not compile (the one it started from).
    result: Any | None


class _CoordescWinners(_Patch):
    """A kernel tuned by coordinate descent loads its winner's binary instead of compiling or tuning again.

    Under `mode="max-autotune"` on a GPU (`coordinate_descent_tuning`), a
    Triton kernel's first launch searches launch configs around its
    autotuning winner, compiling each one it tries, and writes the winner
    to the kernel's `.best_config` marked `found_by_coordesc`. That happens
    after the graph's Triton bundle was collected, so the bundle holds
    neither the winner's binary nor its compile result. A process loading
    the graph from torch's caches then compiles the winner again
    (`slow_precompile_config`: Triton's compiler at the first call), and
    torch 2.11 reads a stored winner only for a kernel with several
    candidates and marks none as found by coordinate descent, so it tunes
    those kernels again at their first launch, benchmarking dozens of
    configs and possibly picking another.

    While installed, the winner each tuning picks is kept with the compile
    result tuning made for it (`coordinate_descent_tuning`,
    `_precompile_config`). A save (`with_winners`) stores it beside the
    graph's static autotuner, with its binary and its `.best_config`. At
    load, `recheck_autotune_cache` makes the stored winner's compile result
    the kernel's one launcher, marked found by coordinate descent, with
    torch's `autotune_cache_info` (its reader, `check_autotune_cache`, run
    once), and nothing compiles or tunes: each graph launches the winner it
    was saved with, even where another graph sharing the kernel's source
    left another winner in the host's `.best_config`, and where torch makes
    the kernel's launcher again from an unmarked copy of the winner's config
    (a reduction on the H100, about one load in eight, tuned again before).
    Anything else (a winner that is not one of the kernel's results, a
    binary that cannot be placed) is torch's own path.

    Torch versions: 2.11 and newer.
    Steps aside: replaces nothing where `CachingAutotuner` lacks
    `coordinate_descent_tuning`, `_precompile_config` or
    `recheck_autotune_cache`, or the module lacks `check_autotune_cache` or
    `triton_config_to_hashable`. Waits for `triton_heuristics` to be
    imported, as `autotune_reuse` does.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        # kernel source file -> its last winner in this process
        self._by_source: dict[str, _Winner] = {}
        # (kernel being tuned, config key -> compile result) while it tunes
        self._tuning: contextvars.ContextVar[tuple[Any, dict[Hashable, Any]] | None] = contextvars.ContextVar(
            "precompile_coordesc_tuning", default=None
        )
        self._to_hashable: Callable[[Any], Hashable] | None = None

    def _stopped(self) -> None:
        with self._lock:
            self._by_source.clear()

    def winner_for(self, filename: Any) -> _Winner | None:
        if not isinstance(filename, str):
            return None
        with self._lock:
            return self._by_source.get(filename)

    def _apply(self) -> None:
        if importlib.util.find_spec(_TRITON_HEURISTICS) is None:
            return
        self._after_import(_TRITON_HEURISTICS, self._patch)

    def _patch(self, th: types.ModuleType) -> None:
        autotuner = getattr(th, "CachingAutotuner", None)
        owned = {} if autotuner is None else vars(autotuner)
        tune = owned.get("coordinate_descent_tuning")
        precompile_config = owned.get("_precompile_config")
        recheck = owned.get("recheck_autotune_cache")
        check = getattr(th, "check_autotune_cache", None)
        to_hashable = getattr(th, "triton_config_to_hashable", None)
        if not all(callable(f) for f in (tune, precompile_config, recheck, check, to_hashable)):
            return
        assert tune is not None and precompile_config is not None and recheck is not None
        assert check is not None and to_hashable is not None
        self._to_hashable = to_hashable
        capture = self
        # torch asks a template or user kernel at every launch and returns at
        # once (these kinds are never tuned): nothing to note there, so those
        # calls skip the bookkeeping on the launch path.
        kinds = getattr(th, "HeuristicType", None)
        never_tuned = frozenset(
            kind for name in ("TEMPLATE", "USER_AUTOTUNE", "FIXED") if (kind := getattr(kinds, name, None)) is not None
        )

        @functools.wraps(precompile_config)
        def _precompile_config(kernel: Any, cfg: Any, *args: Any, **kwargs: Any) -> Any:
            result = precompile_config(kernel, cfg, *args, **kwargs)
            tuning = capture._tuning.get()
            if tuning is not None and tuning[0] is kernel:
                tuning[1][to_hashable(cfg)] = result
            return result

        @functools.wraps(tune)
        def coordinate_descent_tuning(kernel: Any, launcher: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(kernel, "heuristic_type", None) in never_tuned:
                return tune(kernel, launcher, *args, **kwargs)
            served = kernel.__dict__.get(_SERVED_ATTR)
            config = getattr(launcher, "config", None)
            if served is not None and config is not None and to_hashable(config) == served:
                # The stored winner, launched through a launcher torch made
                # again from an unmarked copy of its config (seen on CUDA for
                # a reduction whose launchers were rebuilt after the load):
                # it was tuned where it was saved, so it is not tuned again.
                config.found_by_coordesc = True
                return launcher
            made: dict[Hashable, Any] = {}
            token = capture._tuning.set((kernel, made))
            try:
                winner = tune(kernel, launcher, *args, **kwargs)
            finally:
                capture._tuning.reset(token)
            capture._record(kernel, winner, made)
            return winner

        @functools.wraps(recheck)
        def recheck_autotune_cache(kernel: Any, reload_kernel_from_src: Callable[[], Any]) -> Any:
            stored = kernel.__dict__.pop(WINNER_ATTR, None)
            served = None if stored is None else _stored_winner(kernel, stored, check, to_hashable)
            if served is None:
                return recheck(kernel, reload_kernel_from_src)
            # What torch's recheck does on a hit, without compiling the winner
            # again (or, on torch 2.11, leaving it unread or unmarked).
            chosen, kernel.autotune_cache_info = served
            kernel.compile_results = [chosen]
            chosen.config.found_by_coordesc = True
            kernel.__dict__[_SERVED_ATTR] = to_hashable(chosen.config)
            counters["precompile"]["coordesc_winners_loaded"] += 1
            return None

        self._replace(autotuner, "_precompile_config", _precompile_config)
        self._replace(autotuner, "coordinate_descent_tuning", coordinate_descent_tuning)
        self._replace(autotuner, "recheck_autotune_cache", recheck_autotune_cache)

    def _record(self, kernel: Any, winner: Any, made: dict[Hashable, Any]) -> None:
        config = getattr(winner, "config", None)
        filename = getattr(kernel, "filename", None)
        to_hashable = self._to_hashable
        if not (getattr(config, "found_by_coordesc", False) and isinstance(filename, str) and to_hashable):
            return
        with self._lock:
            self._by_source[filename] = _Winner(config, made.get(to_hashable(config)))
        # Tuning wrote its winner over the kernel's `.best_config` without
        # naming a binary; noted under the winner's, a save carries it.
        cache = getattr(getattr(kernel, "save_cache_hook", None), "__self__", None)
        binary = getattr(winner, "cache_hash", None)
        if cache is not None and isinstance(binary, str):
            autotune_capture.note(cache, binary)

    def stash(self, kernel: Any) -> tuple[Any, Any] | None:
        """What a stored copy of `kernel` carries in `WINNER_ATTR`, or None."""
        found = self.winner_for(getattr(kernel, "filename", None))
        to_hashable = self._to_hashable
        results = list(getattr(kernel, "compile_results", None) or ())
        if found is None or to_hashable is None or not results:
            return None
        key = to_hashable(found.config)
        if any(to_hashable(r.config) == key for r in results):
            return (found.config, None)
        # Stored with its kernel's other compile results, it must launch the
        # same way (statically, from a binary torch's bundle format carries).
        if found.result is None or any(type(r) is not type(found.result) for r in results):
            return None
        return (found.config, _picklable_result(found.result))


coordesc_winners = _CoordescWinners()


def _picklable_result(result: Any) -> Any:
    """A copy of a statically launched compile result without its loaded binary.

    The kernel object pickles without its driver handle and cubin path
    (`__getstate__`); its raw cubin is dropped too, as torch does for the
    results it caches: the binary travels in the bundle's kernel files.
    """
    clean = copy.copy(result)
    kernel = getattr(result, "kernel", None)
    if kernel is not None:
        kernel = copy.copy(kernel)
        if hasattr(kernel, "cubin_raw"):
            kernel.cubin_raw = None
        clean.kernel = kernel
    return clean


def _stored_winner(
    kernel: Any, stored: Any, check: Any, to_hashable: Callable[[Any], Hashable]
) -> tuple[Any, dict[str, Any]] | None:
    """The compile result to launch for `kernel`'s stored winner, with
    torch's read of the host's result (`autotune_cache_info`), or None.

    The winner is the one the saving process launched for this graph: one
    of the kernel's own compile results, or one compiled in tuning whose
    binary is in place (`reload_cubin_path`). The host's `.best_config` may
    name another: two graphs of one process that share a kernel's source
    (the same block compiled under two modes) are each tuned at their first
    launch, and the file, kept where it is already there, holds the first
    graph's winner. Each graph still launches its own, as it did where it
    was saved.
    """
    if not (isinstance(stored, tuple) and len(stored) == 2):
        return None
    config, result = stored
    results = list(getattr(kernel, "compile_results", None) or ())
    filename = getattr(kernel, "filename", None)
    if not results or not filename:
        return None
    try:
        key = to_hashable(config)
        if result is None:
            matches = [r for r in results if to_hashable(r.config) == key]
            if len(matches) != 1:
                return None
            chosen = matches[0]
        elif to_hashable(result.config) != key:
            return None
        else:
            result.reload_cubin_path()
            chosen = result
        _, _, info = check([r.config for r in results], filename, kernel.inductor_meta)
    except Exception:  # an unreadable result or a missing binary: torch's path
        return None
    if info.get("best_config") != key:
        # What torch's info says on a hit, for the winner that launches.
        info = {"best_config": key, "autotune_cache_state": "hit"}
    return chosen, info


def with_winners(bundle: Any) -> Any:
    """`bundle` with the coordinate-descent winners this process found for its static autotuners.

    Each such autotuner is a copy whose kernel carries `WINNER_ATTR`; a
    winner compiled in tuning adds its binary's files (from Triton's cache
    dir, as torch's bundler collects them) to the bundle's kernels.
    """
    autotuners = list(getattr(bundle, "static_autotuners", None) or ())
    if not autotuners:
        return bundle
    kernels = list(bundle.kernel_artifacts)
    have = {k.kernel_hash for k in kernels}
    out = []
    for autotuner in autotuners:
        try:
            stash = coordesc_winners.stash(autotuner.kernel)
            files = None if stash is None or stash[1] is None else _binary_files(stash[1])
        except Exception:  # a winner torch keeps another way: the graph is stored without it, as torch stores it
            counters["precompile"]["coordesc_winners_unstorable"] += 1
            stash = files = None
        if stash is None:
            out.append(autotuner)
            continue
        if files is not None and files.kernel_hash not in have:
            have.add(files.kernel_hash)
            kernels.append(files)
        out.append(with_kernel_attrs(autotuner, **{WINNER_ATTR: stash}))
    if all(a is b for a, b in zip(out, autotuners)):
        return bundle
    return dataclasses.replace(bundle, kernel_artifacts=kernels, static_autotuners=out)


def _binary_files(result: Any) -> Any:
    """The `TritonKernelArtifacts` of a compile result's binary, read from
    Triton's cache dir as torch's bundler reads them (OSError, ValueError
    where they are not there)."""
    from torch._inductor.runtime.cache_dir_utils import triton_cache_dir
    from torch._inductor.runtime.runtime_utils import triton_hash_to_path_key
    from torch._inductor.triton_bundler import TritonKernelArtifact, TritonKernelArtifacts

    binary_hash = result.kernel.hash
    device = result.compile_meta.get("device", 0)
    if not isinstance(binary_hash, str) or not isinstance(device, int):
        raise ValueError(f"no Triton binary named for device {device!r}")
    key = triton_hash_to_path_key(binary_hash)
    path = os.path.join(triton_cache_dir(device), key)
    artifacts = []
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name), "rb") as f:
            payload = f.read()
        if name.endswith(".json"):
            # torch's bundler writes the kernel's dir as a placeholder,
            # replaced by the loading host's dir when it writes the files.
            if TRITON_REPLACE_BYTES in payload:
                raise ValueError(f"{name} holds the bundler's placeholder")
            payload = payload.replace(path.encode(), TRITON_REPLACE_BYTES)
        artifacts.append(TritonKernelArtifact(name, payload))
    if not artifacts:
        raise FileNotFoundError(path)
    return TritonKernelArtifacts(key, device, artifacts)
