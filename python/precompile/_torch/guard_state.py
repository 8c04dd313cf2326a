"""Saving and loading Dynamo guard states: the pickler's reducer rules, dump errors, the state handoff."""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any

import torch._dynamo.package as dynamo_package
from torch._dynamo.exc import PackageError

from .guard_fake_mode import one_fake_mode_per_state
from .guard_state_rules import _REDUCER_RULES, _attributes_read
from .patch import _Patch
from .stored import _changed_reads


class _GuardStateHandoff(_Patch):
    """Hands `CompilePackage.install` the guard states already unpickled.

    The store checks that every stored guard state unpickles before it hands
    an entry to torch (`restore.check`); install() then unpickles each again,
    tenths of a second for a model with many guards. While installed, the
    state the check produced is given to install() for the same bytes object,
    once: torch receives a state no one else has used, as if it had
    unpickled it itself. Bytes it was not handed are unpickled as before.

    Torch versions: 2.11 and newer: no release takes a guard state already
    unpickled.
    Steps aside: never; `torch._dynamo.package.load_guards_state` is wrapped on
    every torch, and bytes it was not handed are torch's to unpickle.
    """

    # States checked but never installed (a later check failed) are dropped
    # beyond this many, oldest first.
    MAX_HELD = 64

    def __init__(self) -> None:
        super().__init__()
        self._held: dict[int, tuple[bytes, Any]] = {}
        self._lock = threading.Lock()

    def _apply(self) -> None:
        original = dynamo_package.load_guards_state
        handoff = self

        @functools.wraps(original)
        def load_guards_state(guards_state: bytes) -> Any:
            with handoff._lock:
                held = handoff._held.pop(id(guards_state), None)
            if held is not None and held[0] is guards_state:
                return held[1]
            return unpickle_guards_state(original, guards_state)

        self._replace(dynamo_package, "load_guards_state", load_guards_state)

    def _stopped(self) -> None:
        with self._lock:
            self._held.clear()

    def load(self, guards_state: bytes) -> Any:
        """Unpickle `guards_state` as install() does, keeping the result for it."""
        if not self.active:
            return dynamo_package.load_guards_state(guards_state)
        state = unpickle_guards_state(self.original(dynamo_package, "load_guards_state"), guards_state)
        with self._lock:
            while len(self._held) >= self.MAX_HELD:
                self._held.pop(next(iter(self._held)))
            self._held[id(guards_state)] = (guards_state, state)
        return state


guard_state_handoff = _GuardStateHandoff()


def load_guards_state(guards_state: bytes) -> Any:
    """Unpickle one guarded code's guard state, as `CompilePackage.install` does
    (and, while installed, keep it for install(); see `_GuardStateHandoff`)."""
    return guard_state_handoff.load(guards_state)


class _GuardStateDumpErrors(_Patch):
    """A guard state that cannot be pickled bypasses the frame, never fails the call.

    torch 2.11 turns only an AttributeError from pickling a guard state
    into a package bypass; any other (`cannot pickle '_contextvars.ContextVar'
    object`, from an object a guard reaches) propagates out of the compile
    and fails the user's call, only because `caching_precompile` is on,
    which `install()` turns on. Newer torch bypasses on anything raised
    there. While installed, such an error bypasses the frame on every torch:
    it compiles and runs, and is saved without compiled code. The state
    returned is empty, and never saved: a bypassed entry keeps no guarded
    code (2.11 asserts a state exists after the compile).

    Torch versions: 2.11; newer torch bypasses on any error itself, so there
    the wrapper finds nothing left to catch.
    Steps aside: `_apply` replaces nothing where
    `CheckFunctionManager.serialize_guards` is missing.
    """

    def _apply(self) -> None:
        from torch._dynamo.guards import CheckFunctionManager

        original = vars(CheckFunctionManager).get("serialize_guards")
        if not callable(original):
            return

        @functools.wraps(original)
        def serialize_guards(self: Any, builder: Any, sorted_guards: Any, output_graph: Any) -> Any:
            try:
                return original(self, builder, sorted_guards, output_graph)
            except PackageError:
                raise  # torch's own bypass
            except Exception as e:
                output_graph.bypass_package(f"Guard evaluation failed: {type(e).__name__}: {e}")
                return b""

        self._replace(CheckFunctionManager, "serialize_guards", serialize_guards)


guard_state_dump_errors = _GuardStateDumpErrors()


class _GuardStateReducers(_Patch):
    """How the store saves what torch's guard-state pickler would not carry faithfully.

    A guard state pickles the frame's scope pruned to what the guards read,
    and the loading process rebuilds every guard on it; a guard's expected
    value is taken from that scope. While installed, one override of
    `GuardsStatePickler.reducer_override` asks each rule below in turn; the
    first that answers saves the object, and anything no rule answers is
    torch's. Each rule says why in its own docstring: `_function_by_value`,
    `_script_function_by_name`, `_unguarded_bystander`, `_dict_subclass_items`,
    `_named_reads`, `_local_classes`.

    Torch versions: 2.11 and newer; each rule decides for itself
    (`_function_by_value` answers nothing where torch has
    `GuardsStatePickler._reduce_function_by_value`, `_script_function_by_name`
    nothing without `torch.jit.ScriptFunction`, `_unguarded_bystander` nothing
    without torch's `_Missing`).
    Steps aside: `_apply` replaces nothing where
    `GuardsStatePickler.reducer_override` or
    `CheckFunctionManager.serialize_guards` is missing; rules that find torch
    does the job themselves are left out.
    """

    def _apply(self) -> None:
        from torch._dynamo.guards import CheckFunctionManager, GuardsStatePickler

        reduce = vars(GuardsStatePickler).get("reducer_override")
        serialize = vars(CheckFunctionManager).get("serialize_guards")
        if reduce is None or not callable(serialize):
            return
        rules = [rule for rule in (make() for make in _REDUCER_RULES) if rule is not None]

        @functools.wraps(reduce)
        def reducer_override(pickler: Any, obj: Any) -> Any:
            for rule in rules:
                reduced = rule(pickler, obj)
                if reduced is not None:
                    return reduced
            return reduce(pickler, obj)

        @functools.wraps(serialize)
        def serialize_guards(self: Any, builder: Any, sorted_guards: Any, *args: Any, **kwargs: Any) -> Any:
            # Which attributes of which objects the guards being saved read,
            # for the rules (`_named_reads`), from the guards' own sources.
            outer = getattr(_attributes_read, "current", None)
            _attributes_read.current = _attributes_of(builder, sorted_guards, args, kwargs)
            try:
                return serialize(self, builder, sorted_guards, *args, **kwargs)
            finally:
                _attributes_read.current = outer

        self._replace(GuardsStatePickler, "reducer_override", reducer_override)
        self._replace(CheckFunctionManager, "serialize_guards", serialize_guards)


def _attributes_of(builder: Any, guards: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[int, set[str]]:
    """For each object some guard's source takes an attribute of (`G['config'].FLAG`,
    `list(dict.keys(G['m'].REGISTRY))[2]`), the names taken, by the object's id."""
    from torch._dynamo.source import AttrSource

    output_graph = args[0] if args else kwargs.get("output_graph")
    sources = [g.originating_source for g in guards]
    sources.extend(getattr(output_graph, "guard_on_key_order", ()) or ())
    found: dict[int, set[str]] = {}
    seen: set[int] = set()
    for source in sources:
        while source is not None and id(source) not in seen:
            seen.add(id(source))
            base = getattr(source, "base", None)
            if isinstance(source, AttrSource) and base is not None:
                try:
                    owner = builder.get(base)
                except Exception:
                    owner = None
                if inspect.ismodule(owner) or isinstance(owner, type):
                    found.setdefault(id(owner), set()).add(source.member)
            source = base
    return found


guard_state_reducers = _GuardStateReducers()


def unpickle_guards_state(unpickle: Callable[[bytes], Any], data: bytes) -> Any:
    """`unpickle(data)`, the state marked with the data found changed since the save."""
    outer = getattr(_changed_reads, "found", None)
    found: list[str] = []
    _changed_reads.found = found
    try:
        with one_fake_mode_per_state():
            state = unpickle(data)
    finally:
        _changed_reads.found = outer
    if found:
        state.precompile_changed = found
    return state
