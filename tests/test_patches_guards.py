"""One test per torch patch of guard states and compiled frames: each shows
what the patch adapts with the store installed, then turns that one patch off
and shows the same check fail. A patch this torch leaves inactive (torch needs
no adaptation) skips its test. Frames compile with the eager backend: what
these patches adapt happens while Dynamo records a frame, before any backend.
"""

from __future__ import annotations

import contextvars
import dataclasses
import pickle
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from support.patches import off, require, tc
from support.torch_contract import WithUnpicklable, forget, scaled_by, times_three_sin
from torch._dynamo.precompile_context import PrecompileContext

import precompile

pytestmark = pytest.mark.torch


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    forget()
    path = tmp_path / "store"
    with precompile.installed(path, save_on_exit=False):
        yield path
    forget()


def _recorded(fn: Callable[..., torch.Tensor], *args: object) -> list[tuple[bool, int]]:
    """Compile `fn` afresh on `args`: (bypassed, compiled variants) of each
    code the entry for the save records."""
    forget(fn)
    try:
        torch.compile(fn, backend="eager")(*args)
        return [(code.bypassed, len(code.guarded_codes)) for code in _entry().codes]
    finally:
        forget(fn)


def _entry() -> Any:
    (entry,) = PrecompileContext._dynamo_cache_entries.values()
    return entry


def test_source_pickling_round_trips_a_source_with_derived_fields(store: Path) -> None:
    require(tc.source_pickling)
    from torch._dynamo.source import DefaultsSource, LocalSource

    source = DefaultsSource(LocalSource("fn"), 0)
    assert pickle.loads(pickle.dumps(source)) == source
    with off(tc.source_pickling), pytest.raises(TypeError):
        pickle.loads(pickle.dumps(source))


def test_unbound_global_names_skip_a_bound_name(store: Path) -> None:
    require(tc.unbound_global_names)
    import torch._dynamo.bytecode_transformation as bt
    from torch._dynamo.output_graph import OutputGraph

    class Graph:
        def __init__(self) -> None:
            self.global_scope: dict[str, object] = {}

        def install_global_unsafe(self, name: str, value: object) -> None:
            self.global_scope[name] = value

    def installed_over_a_bound_name() -> bool:
        # A loaded entry bound the name Dynamo's counter draws next.
        graph = Graph()
        drawn = bt.unique_id("___precompile_test")
        taken = f"___precompile_test_{int(drawn.rsplit('_', 1)[1]) + 1}"
        graph.global_scope[taken] = "bound by a loaded entry"
        return OutputGraph.install_global(graph, "___precompile_test", "new") == taken  # type: ignore[arg-type]

    assert not installed_over_a_bound_name()
    with off(tc.unbound_global_names):
        assert installed_over_a_bound_name()


class _Scaled:
    scale = 2.0


def _by_class(x: torch.Tensor, cfg: object) -> torch.Tensor:
    # An attribute of the argument's class: Dynamo guards the class's identity (CLASS_MATCH).
    return x * type(cfg).scale


def test_named_class_guards_serialize_a_class_identity_guard(store: Path) -> None:
    require(tc.named_class_guards)
    x = torch.ones(3)
    assert _recorded(_by_class, x, _Scaled()) == [(False, 1)]
    with off(tc.named_class_guards):
        # Without it the class guard is not saved: newer torch bypasses the
        # frame, torch 2.11 and 2.12 fail the compile (the guard state is missing).
        try:
            recorded = _recorded(_by_class, x, _Scaled())
        except AssertionError:
            assert torch.__version__.startswith(("2.11", "2.12")), "only torch 2.11 and 2.12 fail the compile here"
        else:
            assert recorded == [(True, 0)]


class _FreshView:
    def __len__(self) -> int:
        return 2


class _ViewingConfig:
    # Its own __getattribute__ makes Dynamo guard the property's result, a
    # new object on every read (transformers' `per_layer_config`).
    def __getattribute__(self, key: str) -> object:
        return super().__getattribute__(key)

    @property
    def view(self) -> _FreshView:
        return _FreshView()


def _through_view(x: torch.Tensor, cfg: _ViewingConfig) -> torch.Tensor:
    return x * len(cfg.view)


def test_guard_passes_start_each_build_with_no_recorded_object(store: Path) -> None:
    """Each of the two guard builds must record the objects it reads afresh:
    a record the first build left names an object the second build does not
    meet again (torch 2.11 then asserts "Guarded object must be identical")."""
    require(tc.guard_passes)
    from torch._dynamo.guards import CheckFunctionManager

    carried: list[int] = []  # per build, the guards that arrive holding a record
    torchs = vars(CheckFunctionManager)["build_guards"]

    def build_guards(manager: object, *args: Any, **kwargs: Any) -> Any:
        carried.append(sum(guard.obj_weakref is not None for guard in args[0]))
        return torchs(manager, *args, **kwargs)

    with off(tc.guard_passes):
        CheckFunctionManager.build_guards = build_guards  # the spy is now torch's build
        try:
            tc.guard_passes.start()
            x = torch.ones(3)
            assert _recorded(_through_view, x, _ViewingConfig()) == [(False, 1)]
            assert len(carried) == 2 and carried == [0, 0]
            tc.guard_passes.stop()
            carried.clear()
            _recorded(_through_view, x, _ViewingConfig())
            assert len(carried) == 2 and carried[1] > 0
        finally:
            tc.guard_passes.stop()
            CheckFunctionManager.build_guards = torchs


class _Collector:
    """transformers' `CompileableContextVar`, reduced: a context variable and
    a lock that no guard reads, beside what the guards do read."""

    def __init__(self) -> None:
        self.context_var: contextvars.ContextVar[dict | None] = contextvars.ContextVar("precompile_test", default=None)
        self.lock = threading.Lock()
        self.global_var: dict | None = None

    def set(self, value: dict) -> None:
        self.global_var = value


_collector = _Collector()


def _collecting(x: torch.Tensor) -> torch.Tensor:
    _collector.set({"hidden_states": []})
    return x.tan()


def test_guard_state_reducers_leave_out_what_no_guard_reads(store: Path) -> None:
    require(tc.guard_state_reducers)
    x = torch.ones(3)
    assert _recorded(_collecting, x) == [(False, 1)]
    with off(tc.guard_state_reducers):
        assert _recorded(_collecting, x) == [(True, 0)]  # no pickler can save a ContextVar


def test_guard_state_reducers_save_a_custom_op_by_name(store: Path) -> None:
    require(tc.guard_state_reducers)
    x = torch.ones(3)
    assert _recorded(times_three_sin, x) == [(False, 1)]
    with off(tc.guard_state_reducers):
        assert _recorded(times_three_sin, x) == [(True, 0)]  # its Library cannot be pickled


with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # torch deprecates torch.jit.script

    @torch.jit.script
    def _scripted_scale(x: torch.Tensor, factor: int) -> torch.Tensor:
        return x * factor


def _scripted(x: torch.Tensor) -> torch.Tensor:
    # Dynamo inlines the Python function and guards the global's type.
    return _scripted_scale(x, 3).sin()


def test_script_function_type_guards_serialize_the_type_of_a_named_script_function(store: Path) -> None:
    require(tc.script_function_type_guards)
    x = torch.ones(3)
    assert _recorded(_scripted, x) == [(False, 1)]
    with off(tc.script_function_type_guards):
        assert _recorded(_scripted, x) == [(True, 0)]


def _made_in_a_function() -> type:
    class Halve(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x / 2

    return Halve


# A module-level name holds an instance of the local class: what carries it.
_HALVE = _made_in_a_function()()


class _Holder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.funcs = {"halve": type(_HALVE)()}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.funcs["halve"](x).cos()


def _through(x: torch.Tensor, holder: torch.nn.Module) -> torch.Tensor:
    return holder(x) + 1


def test_local_class_type_guards_serialize_the_type_of_a_class_a_name_reaches(store: Path) -> None:
    require(tc.local_class_type_guards)
    holder, x = _Holder(), torch.ones(3)
    assert _recorded(_through, x, holder) == [(False, 1)]
    with off(tc.local_class_type_guards):
        assert _recorded(_through, x, holder) == [(True, 0)]
    # A local class no module-level name reaches stays a bypass.
    holder.funcs["halve"] = _made_in_a_function()()
    assert _recorded(_through, x, holder) == [(True, 0)]


def test_guard_state_dump_errors_bypass_the_frame(store: Path) -> None:
    """torch 2.11 lets a guard state's pickling error other than
    AttributeError out of the compile; newer torch turns it into a bypass
    itself, so torch's dump is made to raise as 2.11's does."""
    require(tc.guard_state_dump_errors)
    from torch._dynamo.exc import PackageError
    from torch._dynamo.guards import CheckFunctionManager

    x = torch.ones(3)
    with off(tc.guard_state_dump_errors):
        torchs = vars(CheckFunctionManager)["serialize_guards"]

        def serialize_guards(self: object, builder: object, sorted_guards: object, output_graph: object) -> bytes:
            try:
                return torchs(self, builder, sorted_guards, output_graph)
            except PackageError as e:
                if isinstance(e.__cause__, TypeError):
                    raise e.__cause__ from None  # as 2.11's dump raised it
                raise

        CheckFunctionManager.serialize_guards = serialize_guards  # 2.11's dump is now torch's
        try:
            tc.guard_state_dump_errors.start()
            assert _recorded(scaled_by, x, WithUnpicklable()) == [(True, 0)]
            tc.guard_state_dump_errors.stop()
            with pytest.raises(Exception, match="cannot pickle 'Unpicklable' object"):
                _recorded(scaled_by, x, WithUnpicklable())
        finally:
            tc.guard_state_dump_errors.stop()
            CheckFunctionManager.serialize_guards = torchs


def test_module_alias_recorder_remembers_each_module_alias(store: Path) -> None:
    require(tc.module_alias_recorder)
    import json
    import math

    from torch._dynamo.output_graph import OutputGraph

    class Graph:
        compile_id = 0

        def __init__(self) -> None:
            self.installed_globals: set[str] = set()

        def install_global_unsafe(self, name: str, value: object) -> None:
            self.installed_globals.add(name)

    name = OutputGraph.install_global_by_id(Graph(), "___module_math", math)  # type: ignore[arg-type]
    assert tc.module_alias_recorder.names[name] == "math"
    with off(tc.module_alias_recorder):
        name = OutputGraph.install_global_by_id(Graph(), "___module_json", json)  # type: ignore[arg-type]
        assert name not in tc.module_alias_recorder.names


@dataclasses.dataclass
class _Output:
    hidden: torch.Tensor
    scaled: torch.Tensor | None = None

    def __post_init__(self) -> None:
        # After this break Dynamo compiles the dataclass's generated
        # `__init__` (file "<string>") as a frame of its own.
        torch._dynamo.graph_break()
        self.scaled = self.hidden * 2


def _output_of(x: torch.Tensor) -> torch.Tensor:
    return _Output(x.sin()).scaled + 1


def test_unnamed_frames_store_a_generated_init_through_its_class(store: Path) -> None:
    require(tc.unnamed_frames)
    from torch._dynamo.exc import PackageError

    x = torch.ones(3)
    names = [name for code in _recorded_entry(_output_of, x).codes for name in code.function_names]
    assert "_Output.__init__" in names
    with off(tc.unnamed_frames):
        with pytest.raises(Exception) as raised:
            _recorded_entry(_output_of, x)
        assert isinstance(raised.value, PackageError) or isinstance(raised.value.__cause__, PackageError)


def _recorded_entry(fn: Callable[..., torch.Tensor], *args: object) -> Any:
    forget(fn)
    try:
        torch.testing.assert_close(torch.compile(fn, backend="eager")(*args), fn(*args))
        return _entry()
    finally:
        forget(fn)


def _comprehension(x: torch.Tensor) -> torch.Tensor:
    rows = [(torch._dynamo.graph_break(), row * 2)[1] for row in x.sin().unbind(0)]
    return torch.stack(rows) + 1


@pytest.mark.skipif(sys.version_info < (3, 12), reason="comprehensions run inline from Python 3.12 only")
def test_comprehension_functions_are_part_of_the_package(store: Path) -> None:
    require(tc.comprehension_functions)
    x = torch.ones(2, 3)

    def stored_names() -> list[str]:
        return [name for code in _recorded_entry(_comprehension, x).codes for name in code.function_names]

    assert any(name.startswith("__comprehension") for name in stored_names())
    with off(tc.comprehension_functions):
        assert not any(name.startswith("__comprehension") for name in stored_names())


def _to_cpu_after_a_break(x: torch.Tensor) -> torch.Tensor:
    y = (x * 2).cpu()
    torch._dynamo.graph_break()
    return y + 1  # a resume frame that names only the CPU


def test_device_type_union_keeps_the_accelerator_of_an_earlier_frame(store: Path) -> None:
    require(tc.device_type_union)
    from torch._dynamo.package import CompilePackage

    torchs = tc.device_type_union.original(CompilePackage, "update_device_type")
    if "_device_type" not in torchs.__code__.co_names:
        pytest.skip(f"torch {torch.__version__} accumulates every frame's device itself: the wrapper changes nothing")
    if not torch.cuda.is_available():
        pytest.skip("needs an accelerator")
    x = torch.ones(3, device="cuda")
    assert _recorded_entry(_to_cpu_after_a_break, x).device_type == "cuda"
    with off(tc.device_type_union):
        assert _recorded_entry(_to_cpu_after_a_break, x).device_type == "cpu"


def _fake_tensors(root: object) -> list[Any]:
    """The fake tensors reachable from `root` through containers, modules'
    and plain objects' attributes (not through modules of code or classes)."""
    import gc
    import types

    from torch._subclasses.fake_tensor import FakeTensor

    found: dict[int, Any] = {}
    seen: set[int] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (types.ModuleType, type, types.FunctionType, str, bytes)):
            continue
        seen.add(id(obj))
        if isinstance(obj, FakeTensor):
            found[id(obj)] = obj
            continue
        stack.extend(gc.get_referents(obj))
    return list(found.values())


def test_guard_state_fake_mode_shares_one_mode_among_a_states_tensors(store: Path) -> None:
    """torch rebuilds each stored tensor in a fake mode of its own; while the
    store unpickles a state, its tensors share one, and each is the tensor
    torch would have rebuilt."""
    require(tc.guard_state_fake_mode)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    x = torch.randn(3, 4)
    forget(net.forward)
    try:
        torch.compile(net, backend="eager")(x)
        states = [g.guards_state for code in _entry().codes for g in code.guarded_codes]
        assert len(states) == 1
        (data,) = states
    finally:
        forget(net.forward)

    def modes() -> tuple[int, list[tuple[Any, ...]]]:
        fakes = _fake_tensors(tc.load_guards_state(data))
        described = sorted(
            (tuple(t.shape), t.stride(), t.dtype, t.device, t.requires_grad, type(t).__name__) for t in fakes
        )
        return len({id(t.fake_mode) for t in fakes}), described

    shared, tensors = modes()
    with off(tc.guard_state_fake_mode):
        own, torchs = modes()
    assert len(tensors) >= 4  # the two layers' weights and biases
    assert tensors == torchs
    assert (shared, own) == (1, len(tensors))
