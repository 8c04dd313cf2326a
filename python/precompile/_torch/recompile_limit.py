"""Dynamo's recompile limit: variants loaded from the store count toward it, as in the process that compiled them."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from .patch import _Patch

# Set on the cache size `compute_cache_size` returns: how many loaded
# variants the frame's code holds besides its cache entries.
_LOADED = "_precompile_loaded_variants"


class _LoadedVariantsCounted(_Patch):
    """Variants loaded from the store count toward `recompile_limit`.

    Dynamo compiles at most `recompile_limit` variants of one code object
    (8 by default), then runs that code only with what it has: a guard miss
    runs eagerly. torch keeps loaded (precompile) variants apart from its
    cache entries and counts only the latter, so a fresh process that loaded
    the 8 variants a compiling process stopped at compiles up to 8 more, for
    the very calls the compiling process ran eagerly (EnCodec's weight-normed
    convolution, one variant per layer: 7 graphs compiled on every fresh
    start). While installed, the limit check counts the code's loaded
    variants as cache entries, so a fresh process stops where the compiling
    one stopped and compiles what it would have compiled. Nothing else reads
    the count: whether a compile is a recompilation, and its logs, are
    torch's.

    Torch versions: 2.11 (`compute_cache_size(frame, cache_entry)`) and 2.15
    (`compute_cache_size(frame, cache_entries, total)`, with a total over
    regions) alike.
    Steps aside: where `torch._dynamo.convert_frame` has no
    `compute_cache_size` or `exceeds_recompile_limit`, or the C module no
    `_debug_get_precompile_entries`.
    """

    def _apply(self) -> None:
        import torch._C._dynamo.eval_frame as c_eval_frame
        import torch._dynamo.convert_frame as convert_frame

        loaded_entries = getattr(c_eval_frame, "_debug_get_precompile_entries", None)
        compute = vars(convert_frame).get("compute_cache_size")
        exceeds = vars(convert_frame).get("exceeds_recompile_limit")
        if loaded_entries is None or compute is None or exceeds is None:
            return

        @functools.wraps(compute)
        def compute_cache_size(frame: Any, *args: Any, **kwargs: Any) -> Any:
            size = compute(frame, *args, **kwargs)
            try:
                loaded = len(loaded_entries(frame.f_code))
            except Exception:  # the count is advisory: torch's own size stands
                loaded = 0
            if loaded and dataclasses.is_dataclass(size):
                setattr(size, _LOADED, loaded)
            return size

        @functools.wraps(exceeds)
        def exceeds_recompile_limit(cache_size: Any, *args: Any, **kwargs: Any) -> Any:
            loaded = getattr(cache_size, _LOADED, 0)
            if loaded:
                counted = {
                    f.name: getattr(cache_size, f.name) + loaded
                    for f in dataclasses.fields(cache_size)
                    if f.name.startswith(("num_cache_entries", "total_cache_entries"))
                }
                cache_size = dataclasses.replace(cache_size, **counted)
            return exceeds(cache_size, *args, **kwargs)

        self._replace(convert_frame, "compute_cache_size", compute_cache_size)
        self._replace(convert_frame, "exceeds_recompile_limit", exceeds_recompile_limit)


loaded_variants_counted = _LoadedVariantsCounted()
