"""What torch's own APIs promise, held with the store installed.

Each test follows the shape of torch's own precompile tests: compile with
`caching_precompile`, save through torch's API, reset Dynamo and
PrecompileContext (a new process, as far as Dynamo can tell), then compile
again under `fail_on_recompile`. The store must be invisible: torch's
return values, frame counters, counters and the backends a reload installs.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import functools
import sys
import threading
import types
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
import torch._dynamo.convert_frame as convert_frame
from torch._dynamo.package import DynamoCache
from torch._dynamo.precompile_context import PrecompileContext
from torch._dynamo.utils import counters

import precompile
from precompile.entries import REF_PREFIX
from precompile.miss_log import read_records, summary_lines
from precompile.schema import EntryMeta, parse_meta

pytestmark = pytest.mark.torch


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    torch._dynamo.reset()
    PrecompileContext.clear()
    counters.clear()
    path = tmp_path / "store"
    with precompile.installed(path, save_on_exit=False):
        yield path
    _reset()


def _reset_loaded_entries() -> None:
    # Loaded entries live on the code objects, which outlive a test; some
    # torch releases keep them across torch._dynamo.reset(). Another process
    # would not have them.
    from torch._C._dynamo.eval_frame import _reset_precompile_entries

    for fn in _functions():
        _reset_precompile_entries(fn.__code__)


def _reset() -> None:
    torch._dynamo.reset()
    PrecompileContext.clear()
    _reset_loaded_entries()


def _functions() -> tuple:
    """The functions the tests compile (their code objects are shared)."""

    def sin_cos(x: torch.Tensor) -> torch.Tensor:
        return x.sin() + x.cos()

    def cos_plus(x: torch.Tensor) -> torch.Tensor:
        return x.cos() + x

    def with_break(x: torch.Tensor) -> torch.Tensor:
        y = x.sin() * 2
        torch._dynamo.graph_break()
        return y.cos() + 1

    return sin_cos, cos_plus, with_break


def _saved_sin_cos() -> tuple:
    """`sin_cos` compiled, saved and forgotten: the function, its input and
    its eager output."""
    _sin_cos, _cos_plus, _with_break = _functions()
    x = torch.randn(3, 2)
    expected = _sin_cos(x)
    torch.compile(_sin_cos)(x)
    PrecompileContext.save_to_dynamo_cache()
    _reset()
    return _sin_cos, x, expected


def test_save_to_dynamo_cache_returns_torchs_result(store: Path) -> None:
    _sin_cos, _cos_plus, _with_break = _functions()
    a, b = torch.randn(3, 2), torch.randn(5, 2)
    expected = [_sin_cos(a), _cos_plus(b)]
    torch.testing.assert_close([torch.compile(_sin_cos)(a), torch.compile(_cos_plus)(b)], expected)
    entries = dict(PrecompileContext._dynamo_cache_entries)
    backends = dict(PrecompileContext._backend_artifacts_by_key)
    torchs = PrecompileContext.dump_debug_info(entries, backends)

    info = PrecompileContext.save_to_dynamo_cache()

    assert len(info["dynamo"]) == 2
    assert len(info["backends"]) == 2
    assert {k: v for k, v in info.items() if k != "precompile"} == dict(torchs)
    report = info["precompile"]
    assert report["missing_backends"] == 0
    assert report["backends"] == 2
    assert set(report["entries"]) == set(entries)


def test_reload_serves_every_frame_without_recompiling(store: Path) -> None:
    _sin_cos, _cos_plus, _with_break = _functions()
    a, b = torch.randn(3, 2), torch.randn(5, 2)
    expected = [_sin_cos(a), _cos_plus(b)]
    torch.compile(_sin_cos)(a)
    torch.compile(_cos_plus)(b)
    DynamoCache.clear()
    frames = convert_frame.FRAME_COUNTER
    PrecompileContext.save_to_dynamo_cache()
    _reset()

    with torch.compiler.set_stance("fail_on_recompile"):
        got = [torch.compile(_sin_cos)(a), torch.compile(_cos_plus)(b)]
    torch.testing.assert_close(got, expected)
    # Loading compiles no frame: the counter stands where the cold run left it.
    assert convert_frame.FRAME_COUNTER == frames
    assert counters["dynamo_cache"]["dynamo_cache_hit"] == 2


def test_a_graph_break_reload_installs_every_backend(store: Path) -> None:
    _sin_cos, _cos_plus, _with_break = _functions()
    x = torch.randn(4, 4)
    expected = _with_break(x)
    torch.compile(_with_break)(x)
    info = PrecompileContext.save_to_dynamo_cache()
    assert len(info["backends"]) == 2
    _reset()

    entry = DynamoCache.load(_with_break)
    assert entry is not None
    assert sorted(entry.backends) == sorted(info["backends"])
    _reset()
    with torch.compiler.set_stance("fail_on_recompile"):
        torch.testing.assert_close(torch.compile(_with_break)(x), expected)


def test_fail_on_recompile_still_fails_without_an_entry(store: Path) -> None:
    _sin_cos, _cos_plus, _with_break = _functions()
    torch.compile(_sin_cos)(torch.randn(3, 2))
    # Nothing saved: the store holds no entry, so this is a recompile.
    _reset()
    with torch.compiler.set_stance("fail_on_recompile"):
        with pytest.raises(RuntimeError, match="fail_on_recompile"):
            torch.compile(_sin_cos)(torch.randn(3, 2))
    assert counters["dynamo_cache"]["dynamo_cache_miss"] >= 1


def test_dynamo_cache_clear_forgets_entries(store: Path) -> None:
    _sin_cos, _cos_plus, _with_break = _functions()
    torch.compile(_sin_cos)(torch.randn(3, 2))
    PrecompileContext.save_to_dynamo_cache()
    assert precompile.Store(str(store)).refs(REF_PREFIX)
    DynamoCache.clear()
    assert precompile.Store(str(store)).refs(REF_PREFIX) == []
    _reset()
    assert DynamoCache.load(_sin_cos) is None


def _sin_matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x.sin() @ y


def _sin_matmul_step(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = torch.compile(_sin_matmul)(a, b)
    out.sum().backward()
    return out.detach()


def _artifact_counts(info: object) -> tuple[int, ...]:
    kinds = ("inductor", "autotune", "aot_autograd", "pgo", "precompile")
    return tuple(len(getattr(info, f"{kind}_artifacts")) for kind in kinds)


def test_mega_cache_artifacts_report_and_serve_as_torchs(store: Path, tmp_path: Path) -> None:
    from torch._C._dynamo.eval_frame import _reset_precompile_entries
    from torch._inductor.utils import fresh_cache
    from torch.compiler._cache import CacheArtifactManager

    # torch's own hot-load test (test_cache_hot_load_caching_precompile),
    # with its counts, against the store: a compiled training step's
    # artifacts, then a host with fresh caches and an empty store.
    CacheArtifactManager.clear()
    a = torch.rand(16, 16, requires_grad=True)
    b = torch.rand(16, 16, requires_grad=True)
    expected = _sin_matmul(a, b).detach()
    with fresh_cache():
        torch.testing.assert_close(_sin_matmul_step(a, b), expected)
    assert counters["aot_autograd"]["autograd_cache_miss"] == 1
    assert counters["dynamo_cache"]["dynamo_cache_miss"] == 1
    saved = torch.compiler.save_cache_artifacts()
    assert saved is not None
    artifact_bytes, info = saved
    assert _artifact_counts(info) == (2, 0, 1, 0, 1)
    _reset()
    _reset_precompile_entries(_sin_matmul.__code__)
    counters.clear()
    precompile.uninstall()
    try:
        with (
            precompile.installed(tmp_path / "other-host", save_on_exit=False),
            fresh_cache(),
            torch.compiler.set_stance("fail_on_recompile"),
        ):
            info = torch.compiler.load_cache_artifacts(artifact_bytes)
            assert info is not None and _artifact_counts(info) == (2, 0, 1, 0, 1)
            torch.testing.assert_close(_sin_matmul_step(a, b), expected)
            assert counters["dynamo_cache"]["dynamo_cache_hit"] == 1
            assert counters["dynamo_cache"]["dynamo_cache_miss"] == 0
            assert counters["aot_autograd"]["autograd_cache_miss"] == 0
            assert counters["aot_autograd"]["autograd_cache_hit"] == 0
    finally:
        _reset_precompile_entries(_sin_matmul.__code__)
        CacheArtifactManager.clear()


def test_every_manifest_a_save_writes_validates(store: Path) -> None:
    _sin_cos, _cos_plus, _with_break = _functions()
    torch.compile(_with_break)(torch.randn(4, 4))
    torch.compile(_sin_cos)(torch.randn(3, 2))
    PrecompileContext.save_to_dynamo_cache()
    s = precompile.Store(str(store))
    seen: set[str] = set()
    pending = [s.get_ref(name) for name in s.refs(REF_PREFIX)]
    kinds = set()
    while pending:
        digest = pending.pop()
        if digest in seen:
            continue
        seen.add(digest)
        blob = bytes(s.get(digest))
        if not blob.startswith(b"precompile-manifest\n"):
            continue
        children, meta = s.get_manifest(digest)
        record = parse_meta(meta)
        assert record is not None, meta
        kinds.add(record.KIND)
        # What the record names is exactly what the manifest lists.
        assert sorted(set(record.children())) == sorted(children)
        assert type(record).from_json(record.to_json()) == record
        pending += children
    assert {"precompile/entry", "precompile/aot-backend", "precompile/fx-graph"} <= kinds


def test_entry_metadata_names_the_function(store: Path) -> None:
    _sin_cos, _cos_plus, _with_break = _functions()
    torch.compile(_sin_cos)(torch.randn(3, 2))
    PrecompileContext.save_to_dynamo_cache()
    s = precompile.Store(str(store))
    (name,) = s.refs(REF_PREFIX)
    _, meta = s.get_manifest(s.get_ref(name))
    entry = EntryMeta.from_json(meta)
    assert entry.source.qualname == "_functions.<locals>.sin_cos"
    assert entry.source.file == __file__
    assert entry.source.line == _sin_cos.__code__.co_firstlineno
    assert entry.device_type == "cpu"
    assert entry.torch == torch.__version__


def test_an_entry_that_cannot_install_is_a_miss_with_a_warning(store: Path) -> None:
    _sin_cos, _cos_plus, _with_break = _functions()
    x = torch.randn(3, 2)
    torch.compile(_sin_cos)(x)
    PrecompileContext.save_to_dynamo_cache()
    _reset()
    # Damage what the loaded package installs: its guards state no longer
    # unpickles, as when a stored entry names something this process lacks.
    original = precompile.StoreDynamoCache.load

    def damaged(self: precompile.StoreDynamoCache, fn: object) -> object:
        entry = original(self, fn)
        for code in entry.dynamo.codes:
            for guarded in code.guarded_codes:
                guarded.guards_state = b"\x80\x05not a pickle"
        return entry

    precompile.StoreDynamoCache.load = damaged  # type: ignore[method-assign]
    precompile.install(store, save_on_exit=False)

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = torch.compile(_sin_cos)(x)
    finally:
        precompile.StoreDynamoCache.load = original  # type: ignore[method-assign]
    torch.testing.assert_close(out, _sin_cos(x))
    assert counters["precompile"]["install_failed"] == 1
    assert counters["precompile"]["miss_install_failed"] == 1
    # Nothing of the entry runs, so nothing of it counts as loaded.
    assert counters["precompile"]["frames_loaded"] == 0
    assert counters["precompile"]["entries_loaded"] == 0
    # The process's one miss warning names the function and torch's error.
    installs = [str(w.message) for w in caught if issubclass(w.category, precompile.PrecompileWarning)]
    assert len(installs) == 1, installs
    assert installs[0].startswith(
        "precompile miss (install_failed) for _functions.<locals>.sin_cos (sin_cos): "
        "UnpicklingError: invalid load key, 'n'.; compiling instead."
    ), installs
    # `precompile explain` reads the same miss back, and does not count the
    # entry as loaded.
    records = read_records(str(store))
    [failed] = [r for r in records if r.get("event") == "miss"]
    assert failed["reason"] == "install_failed"
    assert failed["frame"] == "_functions.<locals>.sin_cos (sin_cos)"
    assert "UnpicklingError" in failed["detail"]
    assert summary_lines(records)[-1] == "entries loaded: 0 (0 compiled variants); misses: 1 install_failed"


def test_ls_and_show_name_the_function(store: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    _sin_cos, _cos_plus, _with_break = _functions()
    torch.compile(_sin_cos)(torch.randn(3, 2))
    PrecompileContext.save_to_dynamo_cache()
    cli = [sys.executable, "-m", "precompile", "--store", str(store)]
    listed = json.loads(subprocess.run([*cli, "ls", "--json"], capture_output=True, check=True).stdout)
    (ref,) = listed
    assert ref["entry"]["function"] == "_functions.<locals>.sin_cos"
    assert ref["entry"]["file"] == __file__
    assert ref["entry"]["device"] == "cpu"
    wide = {**os.environ, "COLUMNS": "300"}
    table = subprocess.run([*cli, "ls"], capture_output=True, text=True, check=True, env=wide).stdout
    assert "sin_cos" in table and "test_torch_contract.py:" in table
    shown = subprocess.run([*cli, "show", ref["name"]], capture_output=True, text=True, check=True, env=wide).stdout
    assert "_functions.<locals>.sin_cos" in shown and f"torch {torch.__version__}" in shown


def test_install_reuses_each_checked_guard_state_once(store: Path) -> None:
    """The guard state the store checked is the one torch installs; every
    other read of a guard state unpickles afresh."""
    import torch._dynamo.package as dynamo_package

    from precompile import _torch as tc

    _sin_cos, x, expected = _saved_sin_cos()
    entry = DynamoCache.load(_sin_cos)  # checked: each guard state unpickled once
    assert entry is not None
    (code,) = entry.dynamo.codes
    (guarded,) = code.guarded_codes
    handed = []
    unpickle = dynamo_package.load_guards_state

    def spy(guards_state: bytes) -> object:
        state = unpickle(guards_state)
        handed.append(state)
        return state

    tc.guard_state_handoff.stop()
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
    _reset()
    with torch.compiler.set_stance("fail_on_recompile"):
        torch.testing.assert_close(torch.compile(_sin_cos)(x), expected)


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
    _reset()
    _reset_precompile_entries(_through_view.__code__)
    try:
        with torch.compiler.set_stance("fail_on_recompile"):
            torch.testing.assert_close(torch.compile(_through_view)(x, _ViewingConfig()), x * 2)
            # The loaded guard still checks the view's type.
            with pytest.raises(RuntimeError, match="fail_on_recompile"):
                torch.compile(_through_view)(x, _Scaled())
    finally:
        _reset_precompile_entries(_through_view.__code__)


def _flagged(flag: bool) -> Callable[[Callable[..., torch.Tensor]], Callable[..., torch.Tensor]]:
    def decorate(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        @functools.wraps(fn)
        def doubled_if_flagged(*args: object, **kwargs: object) -> torch.Tensor:
            out = fn(*args, **kwargs)
            return out * 2 if flag else out

        return doubled_if_flagged

    return decorate


def _plus_one(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    @functools.wraps(fn)
    def plus_one(*args: object, **kwargs: object) -> torch.Tensor:
        return fn(*args, **kwargs) + 1

    return plus_one


class _Decorated(torch.nn.Module):
    # Stacked functools.wraps decorators, as transformers' models have: the
    # compiled frame is `plus_one`, and Dynamo guards `flag` through the
    # inner wrapper's closure. That wrapper's copied name imports back to
    # the outer one, so torch alone saves it as a placeholder.
    @_plus_one
    @_flagged(False)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sin()


class _DecoratedFlagged(torch.nn.Module):
    @_plus_one
    @_flagged(True)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sin()


@contextlib.contextmanager
def _saved_and_reloaded(module: type[torch.nn.Module], x: torch.Tensor, expected: torch.Tensor) -> Iterator[None]:
    """Compile `module` on `x`, save, forget every compiled frame, and call
    it again under fail_on_recompile: the stored frame must serve the call.
    The body runs under the same stance."""
    from torch._C._dynamo.eval_frame import _reset_precompile_entries

    code = module.forward.__code__
    torch.testing.assert_close(torch.compile(module())(x), expected)
    PrecompileContext.save_to_dynamo_cache()
    _reset()
    _reset_precompile_entries(code)
    counters.clear()
    try:
        with torch.compiler.set_stance("fail_on_recompile"):
            torch.testing.assert_close(torch.compile(module())(x), expected)
            assert counters["precompile"]["install_failed"] == 0
            assert counters["precompile"]["frames_loaded"] == 1
            yield
    finally:
        _reset_precompile_entries(code)


def test_a_guard_through_a_wrapped_function_loads_and_still_checks(store: Path) -> None:
    x = torch.randn(4)
    with _saved_and_reloaded(_Decorated, x, x.sin() + 1):
        # The same frame code (plus_one's, shared by both classes) under the
        # other flag fails the loaded guard.
        with pytest.raises(RuntimeError, match="fail_on_recompile"):
            torch.compile(_DecoratedFlagged())(x)


def _named(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    # transformers' deprecate_kwarg: the wrapper reads the wrapped function's
    # __name__, which Dynamo (2.13) guards through the closure.
    @functools.wraps(fn)
    def named(*args: object, **kwargs: object) -> torch.Tensor:
        label = f"{type(args[0]).__name__}.{fn.__name__}"
        if "scale" in kwargs:
            warnings.warn(f"{label}: `scale` is deprecated", stacklevel=2)
        return fn(*args, **kwargs)

    return named


class _Named(torch.nn.Module):
    @_plus_one
    @_named
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.cos()


def test_a_guard_on_a_wrapped_function_name_loads(store: Path) -> None:
    """A function a guard reaches is saved by value; it comes back with its
    own `__name__` (not its qualified name), so a guard on the name passes."""
    x = torch.randn(4)
    with _saved_and_reloaded(_Named, x, x.cos() + 1):
        pass


with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # torch deprecates torch.jit.script (a FutureWarning or DeprecationWarning)

    # DeBERTa-v2's helpers (transformers 5.17): Dynamo inlines the Python
    # function and guards the global's type.
    @torch.jit.script
    def _scripted_scale(x: torch.Tensor, factor: int) -> torch.Tensor:
        return x * factor


class _Scripted(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _scripted_scale(x, 3).sin()


def test_a_torchscript_function_in_scope_loads(store: Path) -> None:
    """A module-level script function a guard reads is saved by name: torch
    alone cannot pickle it and saves the frame without compiled code."""
    x = torch.randn(4)
    with _saved_and_reloaded(_Scripted, x, (x * 3).sin()):
        pass


def test_a_torchscript_function_replaced_since_the_save_is_a_miss(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the name holds at load must still be a script function: a plain
    function there is refused (the frame compiles), never served the stored
    code built for the script function."""
    import sys

    from torch._C._dynamo.eval_frame import _reset_precompile_entries

    x = torch.randn(4)
    torch.compile(_Scripted())(x)
    PrecompileContext.save_to_dynamo_cache()
    _reset()
    _reset_precompile_entries(_Scripted.forward.__code__)
    counters.clear()
    monkeypatch.setattr(sys.modules[__name__], "_scripted_scale", lambda x, factor: x * (factor + 1))
    try:
        with pytest.warns(precompile.PrecompileWarning, match="guards_unreadable"):
            torch.testing.assert_close(torch.compile(_Scripted())(x), (x * 4).sin())
        assert counters["precompile"]["frames_loaded"] == 0
        assert counters["precompile"]["miss_guards_unreadable"] == 1
    finally:
        _reset_precompile_entries(_Scripted.forward.__code__)


def test_another_installation_reports_no_miss_for_what_the_last_one_loaded(store: Path, tmp_path: Path) -> None:
    """Code the last installation loaded compiles under a new, empty store
    without a stored-code miss: the new one installed nothing for it."""
    x = torch.randn(4)
    with _saved_and_reloaded(_Named, x, x.cos() + 1):
        pass
    precompile.uninstall()
    with precompile.installed(tmp_path / "other", save_on_exit=False):
        _reset()
        counters.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("error", precompile.PrecompileWarning)
            torch.testing.assert_close(torch.compile(_Named())(x), x.cos() + 1)
        assert counters["precompile"]["frames_recompiled"] == 0
        assert counters["precompile"]["miss_guard_failed"] == 0
        assert counters["precompile"]["miss_not_stored"] == 1  # the other store is empty


class _Collector:
    """transformers' `CompileableContextVar` (output_capturing.py), reduced."""

    def __init__(self) -> None:
        self.context_var: contextvars.ContextVar[dict | None] = contextvars.ContextVar("precompile_test", default=None)
        self.lock = threading.Lock()
        self.global_var: dict | None = None
        self.compiling = False

    def set(self, value: dict) -> contextvars.Token | None:
        if torch.compiler.is_compiling():
            self.global_var, self.compiling = value, True
            return None
        return self.context_var.set(value)

    def reset(self, token: contextvars.Token | None) -> None:
        if self.compiling or token is None:
            self.global_var, self.compiling = None, False
        else:
            self.context_var.reset(token)


_collector = _Collector()


class _Collecting(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        token = _collector.set({"hidden_states": []})
        y = x.tan()
        _collector.reset(token)
        return y


def test_a_context_variable_no_guard_reads_is_left_out_of_the_guard_state(store: Path) -> None:
    """The guards read the collector's type and the keys of its __dict__,
    never its ContextVar or lock, which no pickler can save: torch alone
    bypasses the frame on every version; the store saves and loads it."""
    x = torch.randn(4)
    with _saved_and_reloaded(_Collecting, x, x.tan()):
        pass


def _stored_variants(fn: object) -> list[tuple[bool, int]]:
    entry = DynamoCache.load(fn)
    assert entry is not None
    return [(code.bypassed, len(code.guarded_codes)) for code in entry.dynamo.codes]


class _Unpicklable:
    def __reduce__(self) -> tuple:
        raise TypeError("cannot pickle '_Unpicklable' object")


class _WithUnpicklable:
    def __init__(self) -> None:
        self.scale = 2.0
        self.opaque = _Unpicklable()


def _scaled_by(x: torch.Tensor, holder: _WithUnpicklable) -> torch.Tensor:
    return x * holder.scale


def test_a_guard_state_that_cannot_be_pickled_bypasses_the_frame(store: Path) -> None:
    """A guard reaches an object that cannot be pickled: torch 2.11 raised
    out of the call (only under caching_precompile, which install() turns
    on); newer torch, and the store on every torch, run the frame and save
    it without compiled code."""
    x = torch.randn(3)
    torch.testing.assert_close(torch.compile(_scaled_by)(x, _WithUnpicklable()), x * 2)
    PrecompileContext.save_to_dynamo_cache()
    with pytest.warns(precompile.PrecompileWarning, match="bypassed"):
        assert _stored_variants(_scaled_by) == [(True, 0)]


def test_a_class_identity_guard_is_kept_and_checked(store: Path) -> None:
    from torch._C._dynamo.eval_frame import _reset_precompile_entries

    x = torch.randn(3)
    expected = _by_class(x, _Scaled())
    torch.testing.assert_close(torch.compile(_by_class)(x, _Scaled()), expected)
    PrecompileContext.save_to_dynamo_cache()
    # torch alone stores this frame bypassed (no compiled variant); the store
    # keeps the variant with its class guard.
    assert _stored_variants(_by_class) == [(False, 1)]
    _reset()
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
    except Exception as e:  # noqa: BLE001 - the outcome is what is compared
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
    _reset()
    _reset_precompile_entries(_by_class.__code__)
    precompile.uninstall()
    try:
        with torch._dynamo.config.patch(caching_precompile=True):
            plain = _local_class_outcome()
    finally:
        _reset()
        _reset_precompile_entries(_by_class.__code__)
    assert with_store == ("recorded", [(True, 0)])
    assert plain in (with_store, ("raised", "InternalTorchDynamoError"))


def test_an_entry_that_does_not_serialize_is_skipped_and_the_rest_saved(store: Path) -> None:
    sin_cos, cos_plus, _ = _functions()
    x = torch.randn(3)
    torch.compile(sin_cos)(x)
    torch.compile(cos_plus)(x)
    entries = PrecompileContext._dynamo_cache_entries
    (bad_key,) = [k for k, e in entries.items() if e.fn_name.endswith("cos_plus")]
    # Generated code holding a constant pickle cannot carry (a function with
    # a closure): the shape of what Dynamo's bytecode can hold.
    import dataclasses

    guarded = entries[bad_key].codes[0].guarded_codes[0]
    captured = torch.ones(1)
    code = guarded.dynamo_code
    object.__setattr__(guarded, "dynamo_code", dataclasses.replace(code, co_consts=(*code.co_consts, lambda: captured)))

    with pytest.warns(precompile.PrecompileWarning, match="was not saved"):
        report = precompile.save()

    assert list(report.entries) == [k for k in entries if k != bad_key]
    assert bad_key in report.skipped and "PicklingError" in report.skipped[bad_key]
    assert counters["precompile"]["save_skipped"] == 1
    _reset()
    with torch.compiler.set_stance("fail_on_recompile"):
        torch.testing.assert_close(torch.compile(sin_cos)(x), sin_cos(x))


def test_a_stored_guard_state_builds_the_manager_torchs_load_builds(store: Path) -> None:
    """The manager built from a stored guard state is the one torch's own
    load builds, with each guard built once instead of torch's twice
    (caching_precompile's filter pass keeps every guard of a stored state)."""
    import torch._dynamo.package as dynamo_package
    from torch._guards import Guard

    from precompile import _torch as tc

    _sin_cos, x, expected = _saved_sin_cos()

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


class _A:
    pass


class _B:
    pass


class _C:
    pass


class _D:
    pass


class _Registry(dict):
    """transformers' `_CanRecordRegistry`: keyed by the name of the owner's
    class, and with its own `get`, so Dynamo guards the order of its keys."""

    def __setitem__(self, owner: object, value: dict) -> None:
        super().__setitem__(type(owner).__name__, value)

    def get(self, owner: object) -> dict:  # type: ignore[override]
        return super().get(type(owner).__name__) or {}


_C_MODEL = _C()


# Reached through a module, as transformers' registry is. torch saves the
# module by name, so its guards would be rebuilt on whatever the loading
# process's module holds when `torch.compile` installs the entry.
_registry_module = types.ModuleType("precompile_contract_registry")
_registry_module.REG = _Registry()  # type: ignore[attr-defined]
_registry_module.FACTOR = 2  # type: ignore[attr-defined]
_registry_module.FAST = True  # type: ignore[attr-defined]
_registry_module.ORDERED = None  # type: ignore[attr-defined]  # set below, once its class exists
sys.modules[_registry_module.__name__] = _registry_module


class _Holder:
    """The same registry and factor reached through a class, which is saved by name."""

    REG = _Registry()
    FACTOR = 2
    PROBE = 2


def _class_probe(x: torch.Tensor) -> torch.Tensor:
    return x * _Holder.PROBE


def _guards_class_attributes() -> bool:
    """Whether this torch's own guards, in one process, catch a class
    attribute changed since the compile (2.11's do not)."""
    x = torch.ones(1)
    compiled = torch.compile(_class_probe)
    compiled(x)
    _Holder.PROBE = 3
    try:
        return bool(compiled(x).item() == 3)
    finally:
        _Holder.PROBE = 2
        torch._dynamo.reset()


def _registry_scaled(x: torch.Tensor, deep: bool) -> torch.Tensor:
    if deep:
        for factor in _registry_module.REG.get(_C_MODEL).values():
            x = x * factor
        return x
    return x + 1


def _held_scaled(x: torch.Tensor, deep: bool) -> torch.Tensor:
    if deep:
        for factor in _Holder.REG.get(_C_MODEL).values():
            x = x * factor
        return x
    return x + 1


def _module_scaled(x: torch.Tensor) -> torch.Tensor:
    return x * _registry_module.FACTOR


def _class_scaled(x: torch.Tensor) -> torch.Tensor:
    return x * _Holder.FACTOR


def _flagged(x: torch.Tensor) -> torch.Tensor:
    return x + 1 if _registry_module.FAST else x - 1


class _OrderedRegistry(collections.OrderedDict):
    """An OrderedDict subclass with its own `__setitem__` (as transformers'
    `ModelOutput`): pickle must rebuild it, order and all."""

    def __setitem__(self, key: str, value: int) -> None:
        super().__setitem__(key, value)


_registry_module.ORDERED = _OrderedRegistry(u=3, w=4)  # type: ignore[attr-defined]


def _ordered_scaled(x: torch.Tensor) -> torch.Tensor:
    for factor in _registry_module.ORDERED.values():
        x = x * factor
    return x


@contextlib.contextmanager
def _saved_then_forgotten(fn: Callable[..., torch.Tensor], *calls: tuple) -> Iterator[None]:
    """Compile `fn` on each of `calls`, save, and forget what was compiled
    and loaded, as a fresh process would start; undone on the way out."""
    from torch._C._dynamo.eval_frame import _reset_precompile_entries

    compiled = torch.compile(fn)
    for args in calls:
        compiled(*args)
    PrecompileContext.save_to_dynamo_cache()
    _reset()
    _reset_precompile_entries(fn.__code__)
    counters.clear()
    try:
        yield
    finally:
        _reset_precompile_entries(fn.__code__)


class _Recorder:
    """An object in the registry, as transformers' `OutputRecorder`s are."""


def _fill(registry: _Registry) -> None:
    registry.clear()
    registry[_A()] = {"p": 1}
    # Holding objects, the class's registry is not data the store compares
    # (`_named_reads`).
    registry[_B()] = {"q": _Recorder()} if registry is _Holder.REG else {"q": 2}
    registry[_C()] = {"u": 3, "w": 4}


@pytest.mark.parametrize("through", ["module", "class"])
def test_a_guard_through_a_module_or_class_expects_what_the_compile_saw(store: Path, through: str) -> None:
    """A module global or class attribute changed since the save: torch alone
    rebuilds the guard to expect the new value and runs the code traced with
    the old one. The stored variant refuses the call instead (a miss that
    computes the new value), and serves again once the value is back."""
    from torch._C._dynamo.eval_frame import _reset_precompile_entries

    owner, fn, name = {
        "module": (_registry_module, _module_scaled, "precompile_contract_registry"),
        "class": (_Holder, _class_scaled, "_Holder"),
    }[through]
    if through == "class" and not _guards_class_attributes():
        pytest.skip("this torch's guards miss a changed class attribute in one process too")
    PrecompileContext.clear()
    counters.clear()
    x = torch.ones(3)
    try:
        with _saved_then_forgotten(fn, (x,)):
            owner.FACTOR = 5
            with pytest.warns(precompile.PrecompileWarning, match="guard_failed"):
                torch.testing.assert_close(torch.compile(fn)(x), x * 5)
            assert counters["precompile"]["variants_unbuildable"] == 1
            assert counters["precompile"]["frames_recompiled"] == 1
        [miss] = [r for r in read_records(str(store)) if r.get("event") == "miss" and r["reason"] != "not_stored"]
        assert f"{name}.FACTOR is 5, the compile saw 2" in " ".join(miss["guards"]), miss
        owner.FACTOR = 2
        _reset()
        _reset_precompile_entries(fn.__code__)
        with torch.compiler.set_stance("fail_on_recompile"):
            torch.testing.assert_close(torch.compile(fn)(x), x * 2)
    finally:
        owner.FACTOR = 2
        _reset_precompile_entries(fn.__code__)


def test_a_module_flag_changed_since_the_save_refuses_the_variant(store: Path) -> None:
    """A boolean, the commonest module-level switch: the attribute is the one
    the guard's source names, so its saved value is compared too."""
    from torch._C._dynamo.eval_frame import _reset_precompile_entries

    x = torch.ones(3)
    try:
        with _saved_then_forgotten(_flagged, (x,)):
            _registry_module.FAST = False
            with pytest.warns(precompile.PrecompileWarning, match="guard_failed"):
                torch.testing.assert_close(torch.compile(_flagged)(x), x - 1)
            assert counters["precompile"]["variants_unbuildable"] == 1
        [miss] = [r for r in read_records(str(store)) if r.get("event") == "miss" and r["reason"] != "not_stored"]
        assert "precompile_contract_registry.FAST is False, the compile saw True" in " ".join(miss["guards"]), miss
        _registry_module.FAST = True
        _reset()
        _reset_precompile_entries(_flagged.__code__)
        with torch.compiler.set_stance("fail_on_recompile"):
            torch.testing.assert_close(torch.compile(_flagged)(x), x + 1)
    finally:
        _registry_module.FAST = True
        _reset_precompile_entries(_flagged.__code__)


def test_an_ordered_dict_subclass_a_guard_reads_comes_back_whole(store: Path) -> None:
    """Saved with the values its guards read, an OrderedDict subclass with
    its own `__setitem__` comes back with its keys in order: compared with
    the live one, the same, so the stored variant serves."""
    x = torch.ones(3)
    with _saved_then_forgotten(_ordered_scaled, (x,)):
        with torch.compiler.set_stance("fail_on_recompile"):
            torch.testing.assert_close(torch.compile(_ordered_scaled)(x), x * 12)
        assert counters["precompile"]["variants_unbuildable"] == 0


def test_a_registry_changed_since_the_save_refuses_only_the_variant_that_reads_it(store: Path) -> None:
    """A module-level registry without the key the compile looked up when
    `torch.compile` installs the entry: torch alone fails the whole install
    (IndexError on the key's position). The variant that reads the registry
    refuses every call, even once the key is back (its guards would be
    rebuilt on the registry as it is then); the other variant serves. With
    the registry as it was saved, both serve: it comes back with its keys
    (a dict subclass that rewrites keys on `__setitem__`)."""
    from torch._C._dynamo.eval_frame import _reset_precompile_entries

    x = torch.ones(3)
    registry = _registry_module.REG
    _fill(registry)
    try:
        with _saved_then_forgotten(_registry_scaled, (x, False), (x, True)):
            del registry["_C"]
            compiled = torch.compile(_registry_scaled)  # installs the stored entry
            assert counters["precompile"]["variants_unbuildable"] == 1
            assert counters["precompile"]["install_failed"] == 0
            with torch.compiler.set_stance("fail_on_recompile"):
                torch.testing.assert_close(compiled(x, False), x + 1)
            registry[_C()] = {"u": 5, "w": 6}
            with pytest.warns(precompile.PrecompileWarning, match="guard_failed"):
                torch.testing.assert_close(compiled(x, True), x * 30)
        [miss] = [r for r in read_records(str(store)) if r.get("event") == "miss" and r["reason"] != "not_stored"]
        assert "precompile_contract_registry.REG is {'_A': " in " ".join(miss["guards"]), miss
        _fill(registry)
        _reset()
        _reset_precompile_entries(_registry_scaled.__code__)
        counters.clear()
        compiled = torch.compile(_registry_scaled)
        with torch.compiler.set_stance("fail_on_recompile"):
            torch.testing.assert_close(compiled(x, False), x + 1)
            torch.testing.assert_close(compiled(x, True), x * 12)
        assert counters["precompile"]["variants_unbuildable"] == 0
    finally:
        _reset_precompile_entries(_registry_scaled.__code__)
        _fill(registry)


def test_a_variant_whose_guards_cannot_be_built_refuses_and_the_rest_install(store: Path) -> None:
    """Reached through a class (saved by name), the registry lacks the third
    key when the entry installs: building that variant's guards raises
    IndexError, and torch alone drops the whole entry. That variant refuses
    every call; the other one serves."""
    x = torch.ones(3)
    _fill(_Holder.REG)
    with _saved_then_forgotten(_held_scaled, (x, False), (x, True)):
        del _Holder.REG["_C"]
        compiled = torch.compile(_held_scaled)
        assert counters["precompile"]["variants_unbuildable"] == 1
        assert counters["precompile"]["install_failed"] == 0
        with torch.compiler.set_stance("fail_on_recompile"):
            torch.testing.assert_close(compiled(x, False), x + 1)
        _Holder.REG[_C()] = {"u": 3, "w": 4}
        with pytest.warns(precompile.PrecompileWarning, match="guard_failed"):
            torch.testing.assert_close(compiled(x, True), x * 12)
        assert counters["precompile"]["frames_recompiled"] == 1
    _fill(_Holder.REG)
    [miss] = [r for r in read_records(str(store)) if r.get("event") == "miss" and r["reason"] != "not_stored"]
    assert "variant 1: precompile: these stored guards could not be built at install (IndexError" in " ".join(
        miss["guards"]
    ), miss


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

    _sin_cos, x, expected = _saved_sin_cos()
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
