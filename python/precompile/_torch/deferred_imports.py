"""Optional clients torch imports eagerly but runs only when configured, imported when first used instead."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from typing import Any

from .patch import names_turned_off

# torch's Inductor modules whose import pulls in a client library that only a
# configured remote uses: the module, and the library. `torch._inductor.
# remote_cache` runs `import redis` at import time (a cache hit imports it,
# through `output_code` and `autotune_cache`), about 0.17 s of every process
# start on a 2-core host, while only `RedisRemoteCacheBackend` calls it.
_DEFERRED = (("torch._inductor.remote_cache", "redis"),)
# The modules `remote_cache` imports from torch (its Dynamo timing helper,
# Inductor's config), imported before the stand-in goes in.
_IMPORTED_FIRST = ("torch._dynamo", "torch._inductor.config", "torch.monitor")
# Its name in `PRECOMPILE_PATCHES_OFF` (`patch.OFF_ENV`); the registry accepts
# it there though it is no `_Patch`: it acts at this package's import, not at install.
NAME = "deferred_clients"


class DeferredModule(types.ModuleType):
    """Stands for a module until an attribute of it is read.

    The first attribute read imports the real module (through the import
    system, so `sys.modules` holds one copy, the same object any `import`
    statement gets) and every read is answered from it. Truth is True, as
    a module's is: `if not redis:` in torch reads "installed".
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)
        object.__setattr__(self, "_deferred_lock", threading.Lock())
        object.__setattr__(self, "_deferred_real", None)

    def _deferred_resolve(self) -> types.ModuleType:
        real: types.ModuleType | None = object.__getattribute__(self, "_deferred_real")
        if real is not None:
            return real
        with object.__getattribute__(self, "_deferred_lock"):
            real = object.__getattribute__(self, "_deferred_real")
            if real is None:
                name = object.__getattribute__(self, "__name__")
                # Read while the stand-in is still in sys.modules (an import
                # inside the deferring window): take it out, or the import
                # would hand this stand-in back.
                if sys.modules.get(name) is self:
                    del sys.modules[name]
                real = importlib.import_module(name)
                object.__setattr__(self, "_deferred_real", real)
        return real

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._deferred_resolve(), attr)

    def __setattr__(self, attr: str, value: Any) -> None:
        setattr(self._deferred_resolve(), attr, value)

    def __dir__(self) -> list[str]:
        return dir(self._deferred_resolve())

    def __repr__(self) -> str:
        name = object.__getattribute__(self, "__name__")
        real = object.__getattribute__(self, "_deferred_real")
        return repr(real) if real is not None else f"<module {name!r} (imported when first used)>"


def defer_optional_clients() -> list[str]:
    """Import the torch modules of `_DEFERRED` with their client library
    stood for by a `DeferredModule`; return the libraries deferred.

    Nothing changes where the torch module is already imported, where the
    library already is (one copy, whatever imported it), where the library
    is not installed (torch then sees None, as it would), or where
    `PRECOMPILE_PATCHES_OFF` names `deferred_clients`. The
    stand-in is in `sys.modules` only while the torch module imports, so
    the rest of the process imports the real library as usual.
    """
    deferred: list[str] = []
    if NAME in names_turned_off():
        return deferred
    for module, library in _DEFERRED:
        if module in sys.modules or library in sys.modules:
            continue
        try:
            found = importlib.util.find_spec(library) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            continue
        # What the torch module imports besides the library, first and as
        # usual: nothing else runs while the stand-in is in sys.modules (an
        # `inspect.getmodule` there would read it and import the library).
        for dependency in _IMPORTED_FIRST:
            importlib.import_module(dependency)
        stand_in = DeferredModule(library)
        sys.modules[library] = stand_in
        try:
            importlib.import_module(module)
        finally:
            if sys.modules.get(library) is stand_in:
                del sys.modules[library]
        deferred.append(library)
    return deferred


# At import, before this package's other modules import `torch._inductor`
# (a cache hit's `output_code` imports `remote_cache`): `_torch/__init__.py`
# imports this module first.
DEFERRED_AT_IMPORT = defer_optional_clients()
