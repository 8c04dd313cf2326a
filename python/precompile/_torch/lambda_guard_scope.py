"""Lambda guards of a loaded entry read the live globals, as its other guards do."""

from __future__ import annotations

import functools
import inspect
from typing import Any

from .patch import _Patch

# torch 2.11's body: the lambda guard's `G` is the builder's own scope, which
# on a loaded entry is the globals unpickled from the guard state.
_SAVED_SCOPE = 'globals_for_guard_fn = {"G": self.scope["G"]}'


class _LambdaGuardScope(_Patch):
    """A loaded entry's lambda guards read the live module globals, not the saved copy.

    Dynamo puts some guards on the root as Python lambdas, among them the
    aliasing check of two globals (`G['CHOICE'] is G['MARK']` for a function
    that branches on `CHOICE is MARK`). torch 2.11 binds such a lambda's `G`
    to the builder's scope; when an entry is loaded, that scope is the
    globals unpickled from the guard state, where the two names still hold
    one object, while every accessor guard reads the live module's globals
    (`runtime_global_scope`). The check then always passed: a process whose
    `CHOICE` is another object was served the stored branch, a wrong result.
    While installed, the lambda's `G` is the runtime scope, as torch 2.15
    binds it; in the compiling process the two scopes are one dict, so
    nothing changes there.

    Torch versions: 2.11 (the body above); 2.15 binds the runtime scope itself.
    Steps aside: where `add_python_lambda_leaf_guard_to_root`'s source does
    not bind the builder's scope.
    """

    def _apply(self) -> None:
        from torch._dynamo.guards import GuardBuilder

        original = vars(GuardBuilder).get("add_python_lambda_leaf_guard_to_root")
        if original is None:
            return
        try:
            source = inspect.getsource(original)
        except (OSError, TypeError):
            return
        if _SAVED_SCOPE not in source:
            return

        @functools.wraps(original)
        def add_python_lambda_leaf_guard_to_root(builder: Any, *args: Any, **kwargs: Any) -> Any:
            runtime = getattr(builder, "runtime_global_scope", None)
            scope = builder.scope
            saved = scope.get("G")
            if runtime is None or runtime is saved:
                return original(builder, *args, **kwargs)
            scope["G"] = runtime
            try:
                return original(builder, *args, **kwargs)
            finally:
                scope["G"] = saved

        self._replace(GuardBuilder, "add_python_lambda_leaf_guard_to_root", add_python_lambda_leaf_guard_to_root)


lambda_guard_scope = _LambdaGuardScope()
