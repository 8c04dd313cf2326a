"""Graphs without a tensor op, compiled by Inductor so their entry can be bundled."""

from __future__ import annotations

import functools
from typing import Any

from .patch import _Patch


class _OpFreeGraphs(_Patch):
    """An op-free graph under caching_precompile is compiled, not returned as a bound method.

    A graph whose only call is no tensor op (torchvision's
    `_log_api_usage_once` before a graph break, in every `torchvision.ops`
    function) reaches Inductor with no aten call. Inductor then returns the
    GraphModule's bound `forward` unless functorch's `bundled_autograd_cache`
    flag is set; but AOTAutograd bundles its cache entry whenever
    `should_bundle_autograd_cache()` holds, which `caching_precompile` alone
    makes true, and the bundle refuses anything but compiled output: the
    user's call raises `AssertionError: expected OutputCode, got <class
    'method'>`, with torch's own store as with this one. While installed, such
    a graph is compiled with the flag set, as torch compiles it when the flag
    is on: a compiled graph that runs nothing, stored and loaded like any
    other. Graphs with an op are compiled as before, their cache keys
    unchanged.

    Torch versions: 2.11 to 2.15 check only the flag.
    Steps aside: `_apply` replaces nothing where Inductor has no
    `_compile_fx_inner` or AOTAutograd no `should_bundle_autograd_cache`.
    """

    def _apply(self) -> None:
        try:
            import torch._functorch.config as functorch_config
            import torch._inductor.compile_fx as compile_fx
            from torch._dynamo.utils import count_calls
            from torch._functorch._aot_autograd.autograd_cache import should_bundle_autograd_cache
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
                and count_calls(gm.graph) == 0
            ):
                with functorch_config.patch(bundled_autograd_cache=True):
                    return original(gm, *args, **kwargs)
            return original(gm, *args, **kwargs)

        self._replace(compile_fx, "_compile_fx_inner", _compile_fx_inner)


op_free_graphs = _OpFreeGraphs()
