"""One fake-tensor mode for all the tensors of one guard state, not one per tensor."""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Iterator
from typing import Any

from .patch import _Patch

# The parameters torch's `GuardsStatePickler._unpickle_tensor` takes (2.11
# and newer); a torch whose reducer writes other arguments is left alone.
_UNPICKLE_TENSOR_PARAMS = ("meta_tensor", "device", "pytype", "dispatch_keys_raw", "grad")


class _SharedState(threading.local):
    # None outside `one_fake_mode_per_state`; inside, a list holding the
    # state's (mode, converter) once its first tensor made them.
    current: list[tuple[Any, Any]] | None = None


_shared = _SharedState()


class _GuardStateFakeMode(_Patch):
    """The stored tensors of one guard state share one `FakeTensorMode` when the store unpickles it.

    torch rebuilds every tensor a guard state carries (each parameter and
    buffer the guards read) as a fake tensor in a `FakeTensorMode` made for
    that tensor alone, and the mode's constructor takes a stack trace
    (`traceback.extract_stack()`): for an 8B-shaped Llama's two entries,
    0.25 s of a 1.3 s warm start on the H200. While installed, and only
    while the store unpickles a state (`one_fake_mode_per_state`), the
    tensors of that state are made in one mode and one converter, as the
    tensors of a traced frame are in torch: each has the same meta
    template, device, Python type and dispatch keys as torch would give it,
    which is everything a guard reads. Outside the store's unpickling, and
    for a `.grad` other than a tensor or None (torch's own pruning
    sentinel), torch's function runs.

    Torch versions: 2.11 and newer.
    Steps aside: where `GuardsStatePickler._unpickle_tensor` is missing, is
    not a classmethod, or takes other parameters, or where the converter
    has no `from_meta_and_device`.
    """

    def _apply(self) -> None:
        import torch
        from torch._dynamo.guards import GuardsStatePickler
        from torch._subclasses.fake_tensor import FakeTensorConverter, FakeTensorMode

        raw = vars(GuardsStatePickler).get("_unpickle_tensor")
        if not isinstance(raw, classmethod) or not hasattr(FakeTensorConverter, "from_meta_and_device"):
            return
        original = raw.__func__
        params = tuple(inspect.signature(original).parameters)[1:]
        if params != _UNPICKLE_TENSOR_PARAMS:
            return
        from_raw_repr = torch._C.DispatchKeySet.from_raw_repr

        def _unpickle_tensor(
            cls: Any, meta_tensor: Any, device: Any, pytype: Any, dispatch_keys_raw: int, grad: Any
        ) -> Any:
            held = _shared.current
            if held is None or not (grad is None or isinstance(grad, torch.Tensor)):
                return original(cls, meta_tensor, device, pytype, dispatch_keys_raw, grad)
            if not held:
                held.append((FakeTensorMode(), FakeTensorConverter()))
            mode, converter = held[0]
            ret = converter.from_meta_and_device(mode, meta_tensor, device, pytype, from_raw_repr(dispatch_keys_raw))
            ret.grad = grad
            return ret

        self._replace(GuardsStatePickler, "_unpickle_tensor", classmethod(_unpickle_tensor))


guard_state_fake_mode = _GuardStateFakeMode()


@contextlib.contextmanager
def one_fake_mode_per_state() -> Iterator[None]:
    """Within: the tensors one guard state unpickles share one fake mode (while the patch is active)."""
    outer = _shared.current
    _shared.current = []
    try:
        yield
    finally:
        _shared.current = outer
