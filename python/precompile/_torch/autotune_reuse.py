"""A kernel's saved autotuning result applied again when torch re-adds candidates at load."""

from __future__ import annotations

import functools
import importlib.util
import types
from typing import Any

from .patch import _Patch

_TRITON_HEURISTICS = "torch._inductor.runtime.triton_heuristics"


class _AutotuneReuse(_Patch):
    """A reduction kernel whose candidates torch rebuilt at load takes its saved winner, not a new benchmark.

    Loading a statically launched Triton kernel, Inductor narrows its
    candidate configs to the autotuning result it finds (`.best_config`),
    then `_dynamic_scale_rblock` may add back a smaller-block variant of a
    config that uses many registers. The kernel then has several launchers
    again, and its first launch benchmarks them (`autotune_to_one_config`),
    which on the way imports `torch._inductor.compile_fx` for one helper:
    on an H200, 1.6 s of an 8B-shaped Llama's first calls, on every start,
    torch's own warm start included. That very set of candidates is what the
    saving host benchmarked, and its result is in the same cache under the
    same configs hash. While installed, `autotune_to_one_config` first asks
    Inductor's autotune cache about the launchers' configs
    (`check_autotune_cache`, torch's reader, its checks included); when it
    names exactly one of them, that launcher is kept and nothing is
    benchmarked. Otherwise (no result, another configs hash, a winner found
    by coordinate descent) it is torch's.

    Waits for `triton_heuristics` to be imported (a Triton kernel's code
    imports it): importing it at install cost a CPU-only start about 20 ms.

    Torch versions: 2.11 and newer.
    Steps aside: replaces nothing where `CachingAutotuner` has no
    `autotune_to_one_config` or the module has no `check_autotune_cache`.
    """

    def _apply(self) -> None:
        if importlib.util.find_spec(_TRITON_HEURISTICS) is None:
            return
        self._after_import(_TRITON_HEURISTICS, self._patch)

    def _patch(self, triton_heuristics: types.ModuleType) -> None:
        autotuner = getattr(triton_heuristics, "CachingAutotuner", None)
        original = None if autotuner is None else vars(autotuner).get("autotune_to_one_config")
        check = getattr(triton_heuristics, "check_autotune_cache", None)
        if not callable(original) or not callable(check):
            return

        @functools.wraps(original)
        def autotune_to_one_config(kernel: Any, *args: Any, **kwargs: Any) -> Any:
            chosen = _saved_winner(kernel, check)
            if chosen is None:
                return original(kernel, *args, **kwargs)
            kernel.launchers = [chosen]
            return None

        self._replace(autotuner, "autotune_to_one_config", autotune_to_one_config)


def _saved_winner(kernel: Any, check: Any) -> Any:
    """The launcher the autotune cache names for `kernel`'s launchers, or None."""
    launchers = list(getattr(kernel, "launchers", None) or ())
    filename = getattr(kernel, "filename", None)
    if len(launchers) < 2 or not filename:
        return None
    configs = [launcher.config for launcher in launchers]
    try:
        found, _, _ = check(configs, filename, kernel.inductor_meta)
    except Exception:  # an unreadable result: torch benchmarks as it would
        return None
    if len(found) != 1:
        return None
    # torch's reader returns the matching config itself; a config it built
    # (coordinate descent's winner) has no launcher yet.
    matches = [launcher for launcher in launchers if launcher.config is found[0]]
    return matches[0] if len(matches) == 1 else None


autotune_reuse = _AutotuneReuse()
