"""Frames torch cannot name or pickle as is: unnamed frames, comprehensions, sources, unbound globals, device unions."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import types
from collections.abc import Callable
from typing import Any

import torch._dynamo.package as dynamo_package
from torch._dynamo.exc import PackageError
from torch._dynamo.package import CompilePackage

from .. import object_paths
from .patch import _Patch


class _SourcePickling(_Patch):
    """Guard sources that pickle into something their class can rebuild.

    Some torch releases (2.11) give every guard `Source` dataclass a
    `__reduce__` that passes all fields to the constructor, `init=False`
    ones included (`DefaultsSource.field`, `_name`): the guard state saves,
    then fails to unpickle (`TypeError: DefaultsSource.__init__() takes from
    3 to 4 positional arguments but 6 were given`), so the stored code of any
    model with such a guard (transformers' BertModel) can never load. While
    installed, such classes reduce to their `init` fields only; their
    `__post_init__` derives the rest, so the rebuilt source is equal. Found
    by a round trip, not a version check; classes that pickle correctly are
    left alone.

    Torch versions: 2.11; releases whose `Source.__reduce__` passes only `init`
    fields need nothing.
    Steps aside: per class: `_broken` round-trips each `Source` dataclass's own
    `__reduce__`, and a torch whose classes all pickle correctly gets no
    replacement (inactive).
    """

    @staticmethod
    def _broken(kind: type) -> bool:

        if not dataclasses.is_dataclass(kind) or "__reduce__" not in kind.__dict__:
            return False
        fields = dataclasses.fields(kind)
        init = [f for f in fields if f.init]
        if len(init) == len(fields):
            return False
        # Ask the class's own reduce how many arguments it would pass, on a
        # bare instance (reduce only reads the fields).
        probe = object.__new__(kind)
        for f in fields:
            object.__setattr__(probe, f.name, None)
        try:
            args = kind.__dict__["__reduce__"](probe)[1]
        except Exception:
            return False
        return len(args) != len(init)

    def _apply(self) -> None:

        from torch._guards import Source

        pending = list(Source.__subclasses__())
        seen: set[type] = set()
        while pending:
            cls = pending.pop()
            if cls in seen:
                continue
            seen.add(cls)
            pending.extend(cls.__subclasses__())
            if not self._broken(cls):
                continue

            def __reduce__(self: Any) -> tuple[Any, ...]:
                return (type(self), tuple(getattr(self, f.name) for f in dataclasses.fields(self) if f.init))

            self._replace(cls, "__reduce__", __reduce__)


source_pickling = _SourcePickling()


class _UnboundGlobalNames(_Patch):
    """Fresh global names that skip the names a loaded entry bound.

    `install()` binds a stored code's globals (`__builtins_dict___0`, ...)
    under the names the saving process drew from Dynamo's per-process
    counter, resume functions (`__resume_at_20_1`) among them. Where Dynamo
    draws a name without looking at the scope (torch 2.11: `OutputGraph.
    install_global`, and the resume and comprehension functions the
    translator makes), a frame compiled after a load (a new shape, a guard
    failure, an entry stored without its main frame) can draw the same name
    and fail an assertion inside the user's call. While installed, a drawn
    name that is already bound is drawn again; torch releases that already
    skip bound names (`unique_id_unbound_in`) are left alone.

    Torch versions: 2.11; newer torch skips bound names itself
    (`unique_id_unbound_in`).
    Steps aside: `_apply` replaces nothing where
    `torch._dynamo.bytecode_transformation.unique_id_unbound_in` exists; the
    translator's `unique_id` is wrapped only where it is the module's own.
    """

    def _apply(self) -> None:
        import torch._dynamo.bytecode_transformation as bt
        from torch._dynamo.output_graph import OutputGraph

        if hasattr(bt, "unique_id_unbound_in"):
            return
        original = vars(OutputGraph)["install_global"]

        @functools.wraps(original)
        def install_global(self: Any, prefix: str, value: Any) -> str:
            name = _unbound(lambda: bt.unique_id(prefix), self.global_scope)
            self.install_global_unsafe(name, value)
            return name

        self._replace(OutputGraph, "install_global", install_global)

        from torch._dynamo import symbolic_convert

        drawn = vars(symbolic_convert).get("unique_id")
        if drawn is not bt.unique_id:
            return

        @functools.wraps(drawn)
        def unique_id(name: str, with_uuid: bool = False) -> str:
            # The translator binds what it names in its frame's globals, the
            # scope of the frame being traced.
            tx = getattr(getattr(symbolic_convert, "tls", None), "current_tx", None)
            scope = getattr(getattr(tx, "output", None), "global_scope", None)
            return _unbound(lambda: drawn(name, with_uuid), scope)

        self._replace(symbolic_convert, "unique_id", unique_id)


def _unbound(draw: Callable[[], str], scope: Any) -> str:
    """A name from `draw()` that `scope` (a dict, or None for no check) does not bind."""
    name = draw()
    while isinstance(scope, dict) and name in scope:
        name = draw()
    return name


unbound_global_names = _UnboundGlobalNames()


class _UnnamedFrames(_Patch):
    """Frames whose code torch's package cannot name: by their class, or unstored.

    Under torch.compile Dynamo compiles every frame it enters, code that no
    module attribute reaches included: a dataclass's generated `__init__`
    (file "<string>"), entered eagerly after a graph break in its caller, as
    transformers' model outputs are. torch's package raises PackageError for
    such a frame and the user's call fails. While installed, a generated method
    a class of its module holds is named through that class
    (`object_paths.owner_path`) and stored like any frame. Any other such frame
    compiles against an entry the package does not hold, so it runs as it
    would without caching_precompile and nothing of it is saved: a warm start
    compiles it again. Resume functions it creates stay out of the package
    with it. `on_unnamed(code, error)` is told once per such code and package.

    Torch versions: 2.11 and newer: every release raises PackageError for such a
    frame.
    Steps aside: `_apply` replaces nothing where `CompilePackage` lacks
    `code_context`, `add_resume_function` or `_add_user_function` (a package it
    does not know).
    """

    def __init__(self) -> None:
        super().__init__()
        self.on_unnamed: Callable[[Any, BaseException], None] | None = None
        # Codes of frames compiled outside the package (their resume
        # functions included), per package; weak so a dropped package goes.
        self._detached: Any = None
        # Detached entries being compiled against, by id (they are unhashable).
        self._entries: dict[int, Any] = {}

    def set_on_unnamed(self, on_unnamed: Callable[[Any, BaseException], None]) -> None:
        """Called once per code and package that torch cannot name."""
        self.on_unnamed = on_unnamed

    def _apply(self) -> None:
        import weakref

        code_context = CompilePackage.__dict__.get("code_context")
        add_resume = CompilePackage.__dict__.get("add_resume_function")
        if code_context is None or add_resume is None or not hasattr(CompilePackage, "_add_user_function"):
            return  # a torch whose package we do not know
        self._detached = weakref.WeakKeyDictionary()
        frames = self

        @contextlib.contextmanager
        def detached_context(package: Any, code: Any) -> Any:
            entry = dynamo_package._DynamoCodeCacheEntry(
                python_code=None,  # type: ignore[arg-type]  # never serialized
                python_module="",
                function_names=[],
                guarded_codes=[],
                import_sources={},
                backend_ids=[],
                code_source=None,
                install_to_global=False,
            )
            entry.bypassed = True
            frames._entries[id(entry)] = entry
            package._current_entry = entry
            try:
                yield
            finally:
                frames._entries.pop(id(entry), None)
                package._current_entry = None
                if hasattr(package, "_current_backend_ids"):
                    package._current_backend_ids = []
                # The frame's compiled graphs are reachable from no stored code.
                for backend_id in entry.backend_ids:
                    package._cached_backends.pop(backend_id, None)

        @functools.wraps(code_context)
        def wrapped_code_context(package: Any, code: Any) -> Any:
            detached = frames._detached.setdefault(package, set())
            if code in detached:
                return detached_context(package, code)
            if code not in package._codes and package._current_entry is None:
                try:
                    package._add_user_function(code)
                except PackageError as e:
                    owner = object_paths.owner_path(code)
                    if owner is not None:
                        module_name, path = owner
                        package._add_function(code, module_name, function_name=path, code_source="__code__")
                        return code_context(package, code)
                    detached.add(code)
                    if frames.on_unnamed is not None:
                        frames.on_unnamed(code, e)
                    return detached_context(package, code)
            return code_context(package, code)

        @functools.wraps(add_resume)
        def add_resume_function(package: Any, python_code: Any, *args: Any, **kwargs: Any) -> Any:
            detached = frames._detached.get(package)
            current = package._current_entry
            if detached is not None and current is not None and frames._entries.get(id(current)) is current:
                detached.add(python_code)
                package._resume_codes.add(python_code)
                return None
            return add_resume(package, python_code, *args, **kwargs)

        self._replace(CompilePackage, "code_context", wrapped_code_context)
        self._replace(CompilePackage, "add_resume_function", add_resume_function)

    def _stopped(self) -> None:
        self._detached = None
        self._entries = {}


unnamed_frames = _UnnamedFrames()


class _ComprehensionFunctions(_Patch):
    """A comprehension's graph-break function is part of the package.

    On Python 3.12 comprehensions run inline, and a graph break inside one
    makes Dynamo move the comprehension into a generated function
    (`__comprehension_<fn>_at_<line>`), which it marks to run uncompiled
    (`skip_code`) and binds in the frame's module. The compiled code calls it,
    but torch's package is not told of it, unlike a resume function: a fresh
    process has no such function (the code that calls it by name fails) or,
    where the code carries it as a constant, does not know to skip it, so
    Dynamo compiles it there, a frame the package cannot name. While
    installed, the function is registered as torch registers a resume
    function, under the name Dynamo bound it to; the package stores it
    without compiled variants, and install() binds it and skips it again, as
    the cold process did. Where Dynamo bound the bare code (it calls the
    function from a constant), it is registered without a name, as torch
    registers such a resume function. Found by the method, not a version:
    a torch without it is left alone.

    Torch versions: torch releases that build such functions
    (`_build_comprehension_fn`, on the translator or in
    `torch._dynamo.comprehension_graph_break`), on Python 3.12 and newer.
    Steps aside: `_apply` replaces nothing where neither place defines
    `_build_comprehension_fn`.
    """

    def _apply(self) -> None:
        from torch._dynamo import symbolic_convert

        owner: Any = symbolic_convert.InstructionTranslatorBase
        if "_build_comprehension_fn" not in vars(owner):
            try:
                owner = importlib.import_module("torch._dynamo.comprehension_graph_break")
            except ImportError:
                return
            if "_build_comprehension_fn" not in vars(owner):
                return
        original = vars(owner)["_build_comprehension_fn"]

        @functools.wraps(original)
        def build(tx: Any, *args: Any, **kwargs: Any) -> Any:
            new_code, fn_name = original(tx, *args, **kwargs)
            package = getattr(tx, "package", None)
            if package is not None:
                bound = tx.output.global_scope.get(fn_name)
                # A function (or, for one with free variables, a factory
                # torch's install() builds again) is stored under its name;
                # a bare code object travels in the calling code itself.
                name = None if isinstance(bound, types.CodeType) else fn_name
                package.add_resume_function(new_code, tx.f_globals["__name__"], name)
            return new_code, fn_name

        self._replace(owner, "_build_comprehension_fn", build)


comprehension_functions = _ComprehensionFunctions()


class _DeviceTypeUnion(_Patch):
    """A package's device stays the accelerator once any frame named one.

    Some torch versions (2.11) keep only the device of the last compiled
    frame: a graph break whose resume frame computes on the CPU then saves a
    GPU function as a "cpu" entry, and the store would ship it without
    Triton's stubs and torch would skip its GPU compatibility check. Newer
    torch accumulates every frame's device; this gives older ones the same
    result. Where the package keeps no single `_device_type`, nothing changes.

    Torch versions: 2.11; newer torch accumulates the device itself, and there
    the wrapper never finds a device to put back.
    Steps aside: `_apply` replaces nothing where
    `CompilePackage.update_device_type` is missing.
    """

    def _apply(self) -> None:
        original = CompilePackage.__dict__.get("update_device_type")
        if original is None:
            return

        @functools.wraps(original)
        def update_device_type(package: Any, graph: Any) -> None:
            before = getattr(package, "_device_type", None)
            original(package, graph)
            if isinstance(before, str) and before != "cpu" and getattr(package, "_device_type", None) == "cpu":
                package._device_type = before

        self._replace(CompilePackage, "update_device_type", update_device_type)


device_type_union = _DeviceTypeUnion()
