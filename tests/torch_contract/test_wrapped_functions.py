"""Guards that reach through wrappers, script functions and context variables.

Stacked `functools.wraps` decorators, a wrapped function's name, a
TorchScript function in scope (and one replaced since the save), and a
context variable no guard reads: each frame saves, loads and still checks;
another installation reports no miss for what the last one loaded.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from support.torch_contract import reset, times, times_three_sin
from torch._dynamo.precompile_context import PrecompileContext
from torch._dynamo.utils import counters

import precompile

pytestmark = pytest.mark.torch


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
def _saved_and_forgotten(module: type[torch.nn.Module], x: torch.Tensor) -> Iterator[torch.Tensor]:
    """Compile `module` on `x`, save, and forget every compiled frame and
    counter, as a new process would; the body gets the compiled output and
    runs before the loaded entries are dropped."""
    from torch._C._dynamo.eval_frame import _reset_precompile_entries

    code = module.forward.__code__
    out = torch.compile(module())(x)
    PrecompileContext.save_to_dynamo_cache()
    reset()
    _reset_precompile_entries(code)
    counters.clear()
    try:
        yield out
    finally:
        _reset_precompile_entries(code)


@contextlib.contextmanager
def _saved_and_reloaded(module: type[torch.nn.Module], x: torch.Tensor, expected: torch.Tensor) -> Iterator[None]:
    """Compile `module` on `x`, save, forget every compiled frame, and call
    it again under fail_on_recompile: the stored frame must serve the call.
    The body runs under the same stance."""
    with _saved_and_forgotten(module, x) as compiled, torch.compiler.set_stance("fail_on_recompile"):
        torch.testing.assert_close(compiled, expected)
        torch.testing.assert_close(torch.compile(module())(x), expected)
        assert counters["precompile"]["install_failed"] == 0
        assert counters["precompile"]["frames_loaded"] == 1
        yield


def test_a_guard_through_a_wrapped_function_loads_and_still_checks(store: Path) -> None:
    x = torch.randn(4)
    # The same frame code (plus_one's, shared by both classes) under the
    # other flag fails the loaded guard.
    with (
        _saved_and_reloaded(_Decorated, x, x.sin() + 1),
        pytest.raises(RuntimeError, match="fail_on_recompile"),
    ):
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
    x = torch.randn(4)
    with _saved_and_forgotten(_Scripted, x):
        monkeypatch.setattr(sys.modules[__name__], "_scripted_scale", lambda x, factor: x * (factor + 1))
        with pytest.warns(precompile.PrecompileWarning, match="guards_unreadable"):
            torch.testing.assert_close(torch.compile(_Scripted())(x), (x * 4).sin())
        assert counters["precompile"]["frames_loaded"] == 0
        assert counters["precompile"]["miss_guards_unreadable"] == 1


class _GlobalOp(torch.nn.Module):
    # A custom op through the frame's own global.
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return times(x, 2.0) + 1


class _ModuleOp(torch.nn.Module):
    # A custom op through a function of another module: the guards walk that
    # module's attribute.
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return times_three_sin(x) + 1


_OP_USERS = {"global": (_GlobalOp, lambda x: x * 2 + 1), "module": (_ModuleOp, lambda x: (x * 3).sin() + 1)}


@pytest.mark.parametrize("where", sorted(_OP_USERS))
def test_a_custom_op_in_scope_loads(where: str, store: Path) -> None:
    """A custom op a guard reads is saved by its qualified name: torch alone
    cannot pickle it (its `Library`) and saves the frame without compiled code."""
    module, eager = _OP_USERS[where]
    x = torch.randn(4)
    with _saved_and_reloaded(module, x, eager(x)):
        pass


@pytest.mark.parametrize("where", sorted(_OP_USERS))
def test_a_custom_op_replaced_since_the_save_is_a_miss(
    where: str, store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name that held one custom op at the save and holds another one, of
    the same type, at load is a miss: the stored code calls the op it traced.
    The frame compiles and calls the op the name holds."""
    import support.torch_contract as shared

    module, _ = _OP_USERS[where]
    x = torch.randn(4)
    with _saved_and_forgotten(module, x):
        if where == "global":
            monkeypatch.setitem(globals(), "times", shared.plus)
            expected = x + 2.0 + 1
        else:
            monkeypatch.setattr(shared, "times", shared.plus)
            expected = (x + 3).sin() + 1
        torch.testing.assert_close(torch.compile(module())(x), expected)
        assert counters["precompile"]["frames_loaded"] == 1
        assert counters["precompile"]["miss_guard_failed"] == 1, dict(counters["precompile"])


def test_another_installation_reports_no_miss_for_what_the_last_one_loaded(store: Path, tmp_path: Path) -> None:
    """Code the last installation loaded compiles under a new, empty store
    without a stored-code miss: the new one installed nothing for it."""
    x = torch.randn(4)
    with _saved_and_reloaded(_Named, x, x.cos() + 1):
        pass
    precompile.uninstall()
    with precompile.installed(tmp_path / "other", save_on_exit=False):
        reset()
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
