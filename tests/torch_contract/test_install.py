"""Installing a stored entry as torch's load would, and leaving torch's own paths alone.

The guard state the store checked is the one torch installs, the guard
manager built from a stored state is the one torch's load builds, a warm
start defers full collections as torch's compile does, and a package
installed by hand through torch's CompilePackage stays torch's business.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from support.torch_contract import reset, saved_sin_cos
from torch._dynamo.package import DynamoCache
from torch._dynamo.utils import counters

pytestmark = pytest.mark.torch


def test_install_reuses_each_checked_guard_state_once(store: Path) -> None:
    """The guard state the store checked is the one torch installs; every
    other read of a guard state unpickles afresh."""
    import torch._dynamo.package as dynamo_package

    from precompile import _torch as tc

    _sin_cos, x, expected = saved_sin_cos()
    entry = DynamoCache.load(_sin_cos)  # checked: each guard state unpickled once
    assert entry is not None
    (code,) = entry.dynamo.codes
    (guarded,) = code.guarded_codes
    handed = []
    # torch's own function, read with the store's wrapper off: putting back
    # what was read with it on would leave a stale wrapper as torch's
    # function after uninstall (and its held states) for later tests.
    tc.guard_state_handoff.stop()
    unpickle = dynamo_package.load_guards_state

    def spy(guards_state: bytes) -> object:
        state = unpickle(guards_state)
        handed.append(state)
        return state

    dynamo_package.load_guards_state = spy  # the spy is now torch's function
    try:
        tc.guard_state_handoff.start()
        checked = tc.load_guards_state(guarded.guards_state)
        assert handed == [checked]  # the check unpickles with torch's function
        # torch's call for the same bytes gets that state, once, without
        # unpickling again.
        assert dynamo_package.load_guards_state(guarded.guards_state) is checked
        assert handed == [checked]
        again = dynamo_package.load_guards_state(guarded.guards_state)
        assert again is not checked and handed == [checked, again]
        # Equal bytes in another object are not what was checked.
        tc.load_guards_state(guarded.guards_state)
        fresh = dynamo_package.load_guards_state(bytes(bytearray(guarded.guards_state)))
        assert fresh is handed[-1] and len(handed) == 4
    finally:
        tc.guard_state_handoff.stop()
        dynamo_package.load_guards_state = unpickle
        tc.guard_state_handoff.start()
    assert tc.guard_state_handoff.original(dynamo_package, "load_guards_state") is unpickle
    reset()
    with torch.compiler.set_stance("fail_on_recompile"):
        torch.testing.assert_close(torch.compile(_sin_cos)(x), expected)


def test_a_stored_guard_state_builds_the_manager_torchs_load_builds(store: Path) -> None:
    """The manager built from a stored guard state is the one torch's own
    load builds, with each guard built once instead of torch's twice
    (caching_precompile's filter pass keeps every guard of a stored state)."""
    import torch._dynamo.package as dynamo_package
    from torch._guards import Guard

    from precompile import _torch as tc

    _sin_cos, x, expected = saved_sin_cos()

    installed = dynamo_package.load_guard_manager
    create = Guard.create
    calls: list[tuple[tuple, dict]] = []
    built: list[int] = []

    def spy(*args: object, **kwargs: object) -> object:
        calls.append((args, kwargs))
        return installed(*args, **kwargs)

    def counting_create(self: Guard, *args: object, **kwargs: object) -> object:
        built[-1] += 1
        return create(self, *args, **kwargs)

    dynamo_package.load_guard_manager = spy
    try:
        with torch.compiler.set_stance("fail_on_recompile"):
            torch.testing.assert_close(torch.compile(_sin_cos)(x), expected)
    finally:
        dynamo_package.load_guard_manager = installed
    ((args, kwargs),) = calls
    Guard.create = counting_create  # type: ignore[method-assign]
    try:
        built.append(0)
        # As inside the install of an entry the store served.
        with tc.served_entries.installing():
            ours = installed(*args, **kwargs)
        built.append(0)
        with torch._dynamo.config.patch(caching_precompile=True):
            torchs = tc.unbuildable_guards.original(dynamo_package, "load_guard_manager")(*args, **kwargs)
    finally:
        Guard.create = create  # type: ignore[method-assign]
    assert str(ours) == str(torchs)
    assert "TENSOR_MATCH" in str(ours) or "check_tensor" in str(ours), str(ours)
    assert built[0] > 0 and built[1] == 2 * built[0], built
    # The manager rejects what torch's rejects.
    assert ours.check({"x": x}) and torchs.check({"x": x})
    other = torch.randn(3, 2, dtype=torch.float64)
    assert not ours.check({"x": other}) and not torchs.check({"x": other})


def _plus_length(x: torch.Tensor) -> torch.Tensor:
    return x + x.shape[0]


def test_a_package_installed_by_hand_is_torchs_own(store: Path, tmp_path: Path) -> None:
    # torch's test_package.py drives CompilePackage itself: save through
    # DiskDynamoStore, install by hand, then call with a shape the guards
    # reject. With the store installed that must stay torch's business: no
    # store warning (pytest turns one into an error), no store counter.
    from torch._dynamo.package import CompilePackage, DiskDynamoStore

    ctx = DiskDynamoStore()
    path = str(tmp_path / "by-hand")
    first, inside, outside = torch.randn(3, 2), torch.randn(5, 2), torch.randn(7, 2)
    torch._dynamo.mark_dynamic(first, 0, min=3, max=5)
    package = CompilePackage(_plus_length)
    torch._dynamo.optimize(backend="eager", package=package)(_plus_length)(first)
    for backend_id, backend in package.cached_backends.items():
        ctx.record_eager_backend(backend_id, backend)
    ctx.save_package(package, path)
    torch._dynamo.reset()
    from torch._C._dynamo.eval_frame import _reset_precompile_entries

    _reset_precompile_entries(_plus_length.__code__)
    counters.clear()

    with torch.compiler.set_stance("fail_on_recompile"):
        package, backends = ctx.load_package(_plus_length, path)
        compiled = torch._dynamo.optimize(package=package)(_plus_length)
        package.install(backends)
        torch.testing.assert_close(compiled(inside), _plus_length(inside))
        with pytest.raises(RuntimeError, match="fail_on_recompile"):
            compiled(outside)
    # Outside the stance the rejected call compiles, as in torch alone.
    torch.testing.assert_close(compiled(outside), _plus_length(outside))
    _reset_precompile_entries(_plus_length.__code__)
    assert dict(counters["precompile"]) == {}


def test_a_warm_start_defers_full_collections_as_torchs_compile_does(store: Path) -> None:
    # torch raises CPython's generation-2 threshold while it compiles, since
    # a full collection rescans a heap that is still growing. A warm start
    # grows it as much (Inductor's import, unpickled graphs and guards):
    # backend setup, the store's load and the install run deferred, and the
    # thresholds are the caller's again once the call returns.
    import gc

    import torch._dynamo.package as dynamo_package

    from precompile import restore

    _sin_cos, x, expected = saved_sin_cos()
    seen: dict[str, int] = {}

    def spying(owner: object, name: str, label: str) -> Callable[..., object]:
        inner = getattr(owner, name)

        def spy(*args: object, **kwargs: object) -> object:
            seen[label] = gc.get_threshold()[2]
            return inner(*args, **kwargs)

        return spy

    compiler_config = torch._TorchCompileInductorWrapper.get_compiler_config
    before = gc.get_threshold()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(
            torch._TorchCompileInductorWrapper,
            "get_compiler_config",
            spying(torch._TorchCompileInductorWrapper, "get_compiler_config", "backend setup"),
        )
        mp.setattr(restore, "check", spying(restore, "check", "load"))
        mp.setattr(dynamo_package, "load_guard_manager", spying(dynamo_package, "load_guard_manager", "install"))
        with torch.compiler.set_stance("fail_on_recompile"):
            torch.testing.assert_close(torch.compile(_sin_cos)(x), expected)
    assert torch._TorchCompileInductorWrapper.get_compiler_config is compiler_config
    assert gc.get_threshold() == before
    # torch's own setting where it has one (2.15), else the same default.
    deferred = max(before[2], getattr(torch._dynamo.config, "gc_gen2_threshold_during_compile", 1000))
    assert seen == {"backend setup": deferred, "load": deferred, "install": deferred}
