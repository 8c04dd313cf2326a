"""A loaded entry's tensor guards are rebuilt under the dispatch state they were built under."""

from __future__ import annotations

import functools
from typing import Any

import torch

from .patch import _Patch

# Set on a saved `OutputGraphGuardsState`: the raw include and exclude sets of
# the thread-local dispatch state its guards were built under.
ATTR = "_precompile_dispatch_tls"


class _GuardDispatchTls(_Patch):
    """Saved guards carry the thread-local dispatch key sets they were built under.

    A TENSOR_MATCH guard folds the thread-local include and exclude sets in
    force when it is built into the dispatch keys it expects. Those sets
    differ under `torch.inference_mode()` (no `ADInplaceOrView`) and under
    autocast (its key included). torch builds a loaded entry's guards when
    `torch.compile` wraps the function, outside the user's `with` block, so
    the guards of a frame compiled in inference mode or under autocast
    rejected the same call in a fresh process, and it compiled again. While
    installed, the sets in force when a guard state is saved go with it, and
    the loading process rebuilds that state's guards under them; the checks
    then expect what the compiling process's checks expected. A guard state
    saved without them is rebuilt as torch rebuilds it.

    Torch versions: 2.11 and newer (seen failing on 2.11; harmless where the
    build does not depend on the thread's state).
    Steps aside: where `torch._dynamo.guards.pickle_guards_state`,
    `torch._dynamo.package.load_guard_manager` or
    `torch._C._ForceDispatchKeyGuard` is missing.
    """

    def _apply(self) -> None:
        import torch._dynamo.guards as guards
        import torch._dynamo.package as package

        pickle_state = vars(guards).get("pickle_guards_state")
        load_manager = vars(package).get("load_guard_manager")
        force = getattr(torch._C, "_ForceDispatchKeyGuard", None)
        if pickle_state is None or load_manager is None or force is None:
            return

        @functools.wraps(pickle_state)
        def pickle_guards_state(state: Any, *args: Any, **kwargs: Any) -> Any:
            output_graph = getattr(state, "output_graph", None)
            if output_graph is not None:
                include = torch._C._dispatch_tls_local_include_set().raw_repr()
                exclude = torch._C._dispatch_tls_local_exclude_set().raw_repr()
                object.__setattr__(output_graph, ATTR, (include, exclude))
            return pickle_state(state, *args, **kwargs)

        @functools.wraps(load_manager)
        def load_guard_manager(guards_state: Any, *args: Any, **kwargs: Any) -> Any:
            saved = getattr(getattr(guards_state, "output_graph", None), ATTR, None)
            if not (isinstance(saved, tuple) and len(saved) == 2 and all(isinstance(s, int) for s in saved)):
                return load_manager(guards_state, *args, **kwargs)
            from_raw = torch._C.DispatchKeySet.from_raw_repr
            with force(from_raw(saved[0]), from_raw(saved[1])):
                return load_manager(guards_state, *args, **kwargs)

        self._replace(guards, "pickle_guards_state", pickle_guards_state)
        self._replace(package, "load_guard_manager", load_guard_manager)


guard_dispatch_tls = _GuardDispatchTls()
