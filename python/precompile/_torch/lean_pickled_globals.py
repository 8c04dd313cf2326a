"""Functions a stored graph names but a loading process never calls, unpickled without importing their module."""

from __future__ import annotations

from .patch import _Patch, source_block

# `CompiledFxGraph.fx_kwargs["get_decomp_fn"]`: the compile options Inductor
# keeps on every compiled graph name the decomposition selector. Loading
# the graph reads only `is_inference`, `is_backward`, `static_input_idxs`
# and the like from those options; the selector runs only while a graph is
# lowered, and lowering imports its module itself.
_DEFERRED = (("torch._inductor.decomposition", "select_decomp_table"),)


class _LeanPickledGlobals(_Patch):
    """A stored graph's compile options unpickle without importing Inductor's decomposition table.

    Unpickling a `CompiledFxGraph` imports `torch._inductor.decomposition`
    for the one function its `fx_kwargs` name, and that import builds
    torch's core ATen decomposition table (0.2 s on a CPU host). While
    installed, the store's unpickler gives a `pickling.DeferredGlobal` for
    it instead, as long as the module is not imported: a call imports the
    module and runs the real function, and saving the graph again writes
    the real function's name.

    Torch versions: 2.11 and newer.
    Steps aside: where the module's source defines no module-level function
    of that name (read from the file, not imported).
    """

    def _apply(self) -> None:
        from .. import pickling

        known = frozenset(
            (module, name) for module, name in _DEFERRED if source_block(module, rf"^def {name}\(") is not None
        )
        if known:
            self._replace(pickling, "DEFERRED_GLOBALS", pickling.DEFERRED_GLOBALS | known)


lean_pickled_globals = _LeanPickledGlobals()
