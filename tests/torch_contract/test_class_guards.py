"""Guards on classes and on objects torch alone cannot save.

A class-identity guard is kept and checked; an object made anew on each
read compiles, saves and loads; a guard state that cannot be pickled
bypasses the frame; a local class is refused as torch refuses it; a
`NamedTuple` built in the frame and a generator passed to it load.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import torch
from support.torch_contract import WithUnpicklable, reset, scaled_by
from torch._dynamo.package import DynamoCache
from torch._dynamo.precompile_context import PrecompileContext
from torch._dynamo.utils import counters

import precompile

pytestmark = pytest.mark.torch


class _Scaled:
    scale = 2.0


class _OtherScaled:
    scale = 2.0


def _by_class(x: torch.Tensor, cfg: object) -> torch.Tensor:
    # Reading an attribute of the argument's class makes Dynamo guard on the
    # class's identity (CLASS_MATCH), as transformers' encoder-decoders do
    # with type(self.config).
    return x * type(cfg).scale


class _FreshView:
    def __init__(self, owner: object) -> None:
        self.owner = owner

    def __len__(self) -> int:
        return 2


class _ViewingConfig:
    # A class of its own __getattribute__ makes Dynamo read (and guard) its
    # attributes through `object.__getattribute__`, so the property's result
    # is a guarded object, a new one on every read: transformers' configs
    # and their `per_layer_config`, which every Llama-family model reads.
    def __getattribute__(self, key: str) -> object:
        return super().__getattribute__(key)

    @property
    def view(self) -> _FreshView:
        return _FreshView(self)


def _through_view(x: torch.Tensor, cfg: _ViewingConfig) -> torch.Tensor:
    return x * len(cfg.view)


def test_a_guarded_object_made_anew_on_each_read_compiles_saves_and_loads(store: Path) -> None:
    from torch._C._dynamo.eval_frame import _reset_precompile_entries

    # caching_precompile builds each guard twice; the second build meets a
    # new view while the first is alive. torch 2.11 raised AssertionError
    # ("Guarded object must be identical") out of the call.
    x = torch.randn(3)
    torch.testing.assert_close(torch.compile(_through_view)(x, _ViewingConfig()), x * 2)
    PrecompileContext.save_to_dynamo_cache()
    assert _stored_variants(_through_view) == [(False, 1)]
    reset()
    _reset_precompile_entries(_through_view.__code__)
    try:
        with torch.compiler.set_stance("fail_on_recompile"):
            torch.testing.assert_close(torch.compile(_through_view)(x, _ViewingConfig()), x * 2)
            # The loaded guard still checks the view's type.
            with pytest.raises(RuntimeError, match="fail_on_recompile"):
                torch.compile(_through_view)(x, _Scaled())
    finally:
        _reset_precompile_entries(_through_view.__code__)


class _Pair(NamedTuple):
    total: torch.Tensor
    doubled: torch.Tensor


def _paired(x: torch.Tensor) -> _Pair:
    return _Pair(x.sum(), x * 2)


def _save_and_forget(fn: Any, bound: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Save `fn`'s one stored variant, then forget what a new process would
    not have: Dynamo's state, the loaded entries and the globals it bound
    here under the prefix `bound`."""
    from torch._C._dynamo.eval_frame import _reset_precompile_entries

    PrecompileContext.save_to_dynamo_cache()
    assert _stored_variants(fn) == [(False, 1)]
    reset()
    _reset_precompile_entries(fn.__code__)
    for name in [n for n in globals() if n.startswith(bound)]:
        monkeypatch.delitem(globals(), name)
    counters.clear()


def test_a_named_tuple_built_in_the_frame_loads(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dynamo inlines the tuple's generated `__new__`, whose globals no module
    owns: it binds them under a global it names by their id
    (`___unnamed_scope_<id>_c<n>`) and guards that global's type and the
    identity of the builtin read through it (`tuple.__new__`). Both hold by
    construction in any process. torch alone stores the frame with the type
    check, a KeyError in every other process (the frame compiles again); the
    store drops both and serves the frame."""
    from torch._C._dynamo.eval_frame import _reset_precompile_entries

    x = torch.randn(3)
    torch.testing.assert_close(tuple(torch.compile(_paired)(x)), (x.sum(), x * 2))
    _save_and_forget(_paired, "___unnamed_scope_", monkeypatch)
    try:
        # Not under fail_on_recompile: the loaded code calls `_Pair._make`,
        # a frame with tensors that Dynamo looks at (and skips) on every
        # torch, with or without a store.
        again = torch.compile(_paired)(x)
        assert type(again) is _Pair
        torch.testing.assert_close(tuple(again), (x.sum(), x * 2))
        assert counters["precompile"]["frames_loaded"] == 1, dict(counters["precompile"])
        assert counters["stats"]["unique_graphs"] == 0
        assert counters["precompile"]["frames_recompiled"] == 0
    finally:
        _reset_precompile_entries(_paired.__code__)


def _noisy(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    # Dynamo breaks the graph at the sampling call and guards the type of g.
    return (x + torch.randn(x.shape, generator=g)).sin()


def test_a_generator_argument_loads(store: Path) -> None:
    """torch pickles a generator with its state, which the guard-state
    pickler turns into a fake tensor, and `Generator.__setstate__` raises on
    that at load: torch alone fails the call with a SystemError. The store
    saves the generator's device; the loaded frames draw from the caller's
    generator, as the compiled ones did."""
    from torch._C._dynamo.eval_frame import _reset_precompile_entries

    x = torch.zeros(3)
    expected = _noisy(x, torch.Generator().manual_seed(7))
    torch.testing.assert_close(torch.compile(_noisy)(x, torch.Generator().manual_seed(7)), expected)
    PrecompileContext.save_to_dynamo_cache()
    reset()
    _reset_precompile_entries(_noisy.__code__)
    counters.clear()
    try:
        g = torch.Generator().manual_seed(7)
        torch.testing.assert_close(torch.compile(_noisy)(x, g), expected)
        assert counters["precompile"]["frames_loaded"] == 2, dict(counters["precompile"])
        assert counters["precompile"]["miss_guards_unreadable"] == 0
        assert counters["stats"]["unique_graphs"] == 0
        # The call drew from g: the next draw is eager's second one.
        following = torch.Generator().manual_seed(7)
        torch.randn(3, generator=following)
        torch.testing.assert_close(torch.randn(3, generator=g), torch.randn(3, generator=following))
    finally:
        _reset_precompile_entries(_noisy.__code__)


class _Traced(torch.Tensor):
    """A subclass with `__torch_function__`, as tensor-wrapping libraries write one."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return super().__torch_function__(func, types, args, kwargs or {})


def _shifted(x: torch.Tensor) -> torch.Tensor:
    return x.sin() + 1


def test_a_tensor_subclass_with_torch_function_loads(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dynamo binds the subclass under a global it names by the class's id
    (`__subclass_<Name>_<id>_c<n>`), which the generated code loads to wrap
    the graph's output in the subclass, and guards `Tensor.__torch_function__`
    through it. torch alone stores the frame without that global (no other
    process binds it); the store carries the class by module and name, binds
    it at install and serves the frame."""
    from torch._C._dynamo.eval_frame import _reset_precompile_entries

    x = torch.arange(3.0).as_subclass(_Traced)
    out = torch.compile(_shifted)(x)
    assert type(out) is _Traced
    _save_and_forget(_shifted, "__subclass_", monkeypatch)
    try:
        with torch.compiler.set_stance("fail_on_recompile"):
            again = torch.compile(_shifted)(x)
        assert type(again) is _Traced
        torch.testing.assert_close(again.as_subclass(torch.Tensor), out.as_subclass(torch.Tensor))
        assert counters["precompile"]["frames_loaded"] == 1, dict(counters["precompile"])
        assert counters["stats"]["unique_graphs"] == 0
        # A plain tensor is not served the subclass's code.
        with pytest.raises(RuntimeError, match="fail_on_recompile"), torch.compiler.set_stance("fail_on_recompile"):
            torch.compile(_shifted)(torch.arange(3.0))
    finally:
        _reset_precompile_entries(_shifted.__code__)


def test_a_local_tensor_subclass_is_compiled_again_not_served(store: Path) -> None:
    """A subclass defined in a function has no name another process finds:
    its frame is never served there (left unstored, or a miss that names the
    unbound global), and the call runs."""
    from torch._C._dynamo.eval_frame import _reset_precompile_entries

    class Local(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            return super().__torch_function__(func, types, args, kwargs or {})

    x = torch.arange(3.0).as_subclass(Local)
    assert type(torch.compile(_shifted)(x)) is Local
    with warnings.catch_warnings():
        # AOTAutograd's cache cannot key a graph over a local class either
        # (the save says so); what counts is what a loading process does.
        warnings.simplefilter("ignore", precompile.PrecompileWarning)
        PrecompileContext.save_to_dynamo_cache()
    reset()
    _reset_precompile_entries(_shifted.__code__)
    counters.clear()
    try:
        again = torch.compile(_shifted)(x)
        assert type(again) is Local
        torch.testing.assert_close(again.as_subclass(torch.Tensor), x.as_subclass(torch.Tensor).sin() + 1)
        assert counters["precompile"]["frames_loaded"] == 0, dict(counters["precompile"])
        assert counters["stats"]["unique_graphs"] == 1
    finally:
        _reset_precompile_entries(_shifted.__code__)


def _stored_variants(fn: object) -> list[tuple[bool, int]]:
    entry = DynamoCache.load(fn)
    assert entry is not None
    return [(code.bypassed, len(code.guarded_codes)) for code in entry.dynamo.codes]


def test_a_guard_state_that_cannot_be_pickled_bypasses_the_frame(store: Path) -> None:
    """A guard reaches an object that cannot be pickled: torch 2.11 raised
    out of the call (only under caching_precompile, which install() turns
    on); newer torch, and the store on every torch, run the frame and save
    it without compiled code."""
    x = torch.randn(3)
    torch.testing.assert_close(torch.compile(scaled_by)(x, WithUnpicklable()), x * 2)
    PrecompileContext.save_to_dynamo_cache()
    with pytest.warns(precompile.PrecompileWarning, match="bypassed"):
        assert _stored_variants(scaled_by) == [(True, 0)]


def test_a_class_identity_guard_is_kept_and_checked(store: Path) -> None:
    from torch._C._dynamo.eval_frame import _reset_precompile_entries

    x = torch.randn(3)
    expected = _by_class(x, _Scaled())
    torch.testing.assert_close(torch.compile(_by_class)(x, _Scaled()), expected)
    PrecompileContext.save_to_dynamo_cache()
    # torch alone stores this frame bypassed (no compiled variant); the store
    # keeps the variant with its class guard.
    assert _stored_variants(_by_class) == [(False, 1)]
    reset()
    _reset_precompile_entries(_by_class.__code__)
    with torch.compiler.set_stance("fail_on_recompile"):
        torch.testing.assert_close(torch.compile(_by_class)(x, _Scaled()), expected)
        # Another class with the same attribute fails the loaded guard: a
        # compile (refused here), never the stored variant.
        with pytest.raises(RuntimeError, match="fail_on_recompile"):
            torch.compile(_by_class)(x, _OtherScaled())
    _reset_precompile_entries(_by_class.__code__)


def _local_class_outcome() -> tuple[str, object]:
    """What compiling `_by_class` on a local class leaves: the error raised,
    or the variants recorded for the save."""

    class Local:
        scale = 3.0

    x = torch.randn(3)
    try:
        torch.testing.assert_close(torch.compile(_by_class)(x, Local()), x * 3.0)
    except Exception as e:
        return "raised", type(e).__name__
    (entry,) = PrecompileContext._dynamo_cache_entries.values()
    return "recorded", [(code.bypassed, len(code.guarded_codes)) for code in entry.codes]


def test_a_local_class_guard_is_refused_as_torch_refuses_it(store: Path) -> None:
    from torch._C._dynamo.eval_frame import _reset_precompile_entries

    # A class its name cannot import back: torch bypasses the frame (newer
    # torch) or raises out of the call (2.11, whose guard-state dump turns
    # only an AttributeError into a bypass). The store bypasses it on every
    # torch: refused as torch refuses it, and the call runs.
    with_store = _local_class_outcome()
    reset()
    _reset_precompile_entries(_by_class.__code__)
    precompile.uninstall()
    try:
        with torch._dynamo.config.patch(caching_precompile=True):
            plain = _local_class_outcome()
    finally:
        reset()
        _reset_precompile_entries(_by_class.__code__)
    assert with_store == ("recorded", [(True, 0)])
    assert plain in (with_store, ("raised", "InternalTorchDynamoError"))
