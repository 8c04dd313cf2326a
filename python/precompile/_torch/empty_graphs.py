"""Graphs with no operation compile to a storable backend while precompile records backends."""

from __future__ import annotations

import functools
from typing import Any

from .patch import _Patch


class _EmptyGraphBackends(_Patch):
    """A graph with no operation compiles to a storable backend, not torch's bare `gm.forward`.

    With `caching_precompile`, AOTAutograd bundles every compiled graph into
    the entry it records (`should_bundle_autograd_cache()`), and that bundle
    takes only Inductor's `OutputCode`. Inductor returns a graph with no
    operation as the graph module's own `forward` unless
    `torch._functorch.config.bundled_autograd_cache` is set, which
    `caching_precompile` does not set: the bundle then fails the compile
    (`AssertionError: expected OutputCode, got <class 'method'>`). A compiled
    training step whose optimizer step graph-breaks leaves such a graph (a
    piece that only returns its inputs). While installed, a graph with no
    operation compiles as torch compiles it for a bundled cache: through
    Inductor's codegen, to an `OutputCode` the entry carries.

    Torch versions: 2.11 and newer: every release checks only
    `bundled_autograd_cache` before returning `gm.forward`.
    Steps aside: where `torch._inductor.compile_fx._compile_fx_inner` is
    missing; a graph with operations, an AOT compile, or a process with
    `bundled_autograd_cache` already set is torch's.
    """

    def _apply(self) -> None:
        import torch
        import torch._inductor.compile_fx as compile_fx

        inner = vars(compile_fx).get("_compile_fx_inner")
        if not callable(inner):
            return
        from torch._dynamo.utils import count_calls
        from torch._inductor.virtualized import V

        @functools.wraps(inner)
        def _compile_fx_inner(gm: Any, *args: Any, **kwargs: Any) -> Any:
            if (
                torch._dynamo.config.caching_precompile
                and not torch._functorch.config.bundled_autograd_cache
                and not V.aot_compilation
                and count_calls(gm.graph) == 0
            ):
                with torch._functorch.config.patch(bundled_autograd_cache=True):
                    return inner(gm, *args, **kwargs)
            return inner(gm, *args, **kwargs)

        self._replace(compile_fx, "_compile_fx_inner", _compile_fx_inner)


empty_graph_backends = _EmptyGraphBackends()
