"""Why AOTAutograd's cache bypassed a graph: the cause a save names for a backend never recorded."""

from __future__ import annotations

import functools
import threading
from typing import Any

from .patch import _Patch

# What a bypass reason says when it names a custom autograd.Function's
# higher-order op: torch caches those only when told to.
_CUSTOM_AUTOGRAD = "autograd_function_apply"
_CUSTOM_AUTOGRAD_HINT = (
    "torch caches graphs calling a custom autograd.Function only with "
    "TORCHINDUCTOR_AUTOGRAD_CACHE_ALLOW_CUSTOM_AUTOGRAD=1 "
    "(torch._functorch.config.autograd_cache_allow_custom_autograd_functions)"
)
# A reason is one line of a warning: torch's can span lines and name a whole graph.
_MAX_REASON = 300


class _BypassReasons(_Patch):
    """Records why AOTAutograd's cache bypassed each graph, by backend id.

    A graph AOTAutograd will not cache (a higher-order op torch does not
    mark cacheable, such as `torch.cond` or a custom `autograd.Function`) is
    never recorded as a backend, so the save keeps its code without compiled
    variants and every start compiles it again, with torch's store and ours.
    torch says why only in an INFO log line. While installed, the reason
    the cache key could not be computed is kept under the graph's backend
    id, and the save's warning for that backend names it.

    Torch versions: 2.11 and newer.
    Steps aside: where `autograd_cache` has no module-level
    `autograd_cache_key`.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._reasons: dict[str, str] = {}

    def reason(self, backend_id: str) -> str | None:
        """Why AOTAutograd's cache bypassed the graph of `backend_id`, if it did here."""
        with self._lock:
            return self._reasons.get(backend_id)

    def _apply(self) -> None:
        from torch._functorch._aot_autograd import autograd_cache

        original = vars(autograd_cache).get("autograd_cache_key")
        if not callable(original):
            return
        hook = self

        @functools.wraps(original)
        def autograd_cache_key(gm: Any, example_inputs: Any, config: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return original(gm, example_inputs, config, *args, **kwargs)
            except Exception as e:
                backend_id = getattr(config, "precompile_backend_id", None)
                if isinstance(backend_id, str):
                    with hook._lock:
                        hook._reasons[backend_id] = describe(e)
                raise

        self._replace(autograd_cache, "autograd_cache_key", autograd_cache_key)

    def _stopped(self) -> None:
        with self._lock:
            self._reasons.clear()


def describe(error: BaseException) -> str:
    """One line for a bypass: torch's reason, with the switch torch offers where it has one."""
    text = " ".join(str(error).split()) or type(error).__name__
    if len(text) > _MAX_REASON:
        text = text[: _MAX_REASON - 3] + "..."
    if _CUSTOM_AUTOGRAD in text:
        text = f"{text}; {_CUSTOM_AUTOGRAD_HINT}"
    return text


bypass_reasons = _BypassReasons()
