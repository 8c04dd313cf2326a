"""Building and evaluating stored guards: one pass per variant, refusals of unbuildable variants, changed sources."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import inspect
import logging
import threading
from collections.abc import Callable
from typing import Any

import torch
import torch._dynamo.package as dynamo_package
from torch._dynamo.utils import counters

from .. import object_paths
from .install import served_entries
from .patch import _Patch

log = logging.getLogger(__name__)


class _GuardEvaluation(_Patch):
    """Routes torch's guard-string evaluation through `precompile.guards`.

    FxGraphCache and AOTAutogradCache keep several entries under one key and
    pick one by evaluating each entry's stored guard string with
    `ShapeEnv.evaluate_guards_expression`, which is `eval`. While installed,
    that method parses the string into an allowlisted expression instead; a
    string outside the allowlist is a miss (and a counter), so torch
    compiles rather than running it.

    Torch versions: 2.11 and newer: every release evaluates the stored strings
    with `eval`.
    Steps aside: never; `ShapeEnv.evaluate_guards_expression` is replaced on
    every torch (KeyError at install where it is gone).
    """

    def _apply(self) -> None:
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        original = vars(ShapeEnv)["evaluate_guards_expression"]

        @functools.wraps(original)
        def evaluate_guards_expression(shape_env: Any, code: str, args: Any) -> Any:
            from .. import guards

            values = list(args)
            if not all(type(v) in (int, float, bool) or isinstance(v, torch.Tensor) for v in values):
                # Symbolic arguments come from a live trace, not from disk.
                return original(shape_env, code, args)
            counters["precompile"]["guard_evaluations"] += 1
            try:
                return guards.evaluate_guard(code, values)
            except guards.GuardSyntaxError:
                counters["precompile"]["guards_refused"] += 1
                log.warning("refusing a stored guard expression", exc_info=True)
                return False

        self._replace(ShapeEnv, "evaluate_guards_expression", evaluate_guards_expression)


guard_evaluation = _GuardEvaluation()


def _config_patches_are_thread_local() -> bool:
    """Whether a `torch._dynamo.config.patch` holds for the patching thread
    only (newer torch keeps each override in a ContextVar)."""
    entry = getattr(torch._dynamo.config, "_config", {}).get("caching_precompile")
    return isinstance(getattr(entry, "user_override", None), contextvars.ContextVar)


STORED_GUARDS_BUILT_ONCE = _config_patches_are_thread_local()


def _stored_guards_built_once() -> Any:
    """Build a stored guard state's manager in one pass.

    With `caching_precompile` on, `CheckFunctionManager` builds every guard
    twice: once to evaluate its filter, which drops the guard kinds a saved
    state cannot hold (ID_MATCH, CLOSURE_MATCH, WEAKREF_ALIVE, DICT_VERSION),
    then again with the survivors. A stored state went through that filter
    when it was saved, and saving refuses those kinds outright, so the
    filter keeps every guard of it: the second pass alone builds the same
    manager (a test compares the two). Where config patches are per-thread
    the flag is lifted for this thread only, so no other thread's compile
    ever sees it off, and neither the filter nor its pass runs. Elsewhere
    (torch 2.11) the filter still runs, and the second pass reuses the
    first pass's build when the filter kept every guard (`guard_passes`).
    """
    if STORED_GUARDS_BUILT_ONCE:
        return torch._dynamo.config.patch(caching_precompile=False)
    return _reusing_filter_pass()


# The filter pass's build of the stored guard state this thread is loading.
_stored_build = threading.local()


@contextlib.contextmanager
def _reusing_filter_pass() -> Any:
    previous = getattr(_stored_build, "memo", None)
    _stored_build.memo = {}
    try:
        yield
    finally:
        _stored_build.memo = previous


class _StoredCodeWatch(_Patch):
    """Tells a listener when Dynamo compiles a frame the store installed code for.

    `CompilePackage.install` builds one guard manager per stored guarded code
    (through `package.load_guard_manager`, which `_UnbuildableGuards` wraps
    and which `record`s each manager here); Dynamo compiles a frame (through
    `convert_frame._compile`) only when none of them accepted it. Knowing
    both lets the listener evaluate the stored guards on the frame that
    missed and say which one failed, with torch's own verbose guard text,
    and whether Dynamo's recompile limit check (as installed) runs the frame
    eagerly instead of compiling it.

    Torch versions: 2.11 and newer: no release says which stored guard failed on
    a recompile.
    Steps aside: never; started by `explain.begin`, not by the registry, and
    `convert_frame._compile` is wrapped on every torch.
    """

    def __init__(self) -> None:
        super().__init__()
        self._managers: dict[Any, list[Any]] = {}
        self.on_compile: Callable[[Any, dict[str, Any], list[Any], str | None], None] | None = None

    def watch(self, on_compile: Callable[[Any, dict[str, Any], list[Any], str | None], None]) -> None:
        """Start, telling `on_compile(code, f_locals, managers, past_limit)` of
        each such compile; `past_limit` names the limit the compile is past,
        with its value (`recompile_limit (8)`), or is None."""
        self.on_compile = on_compile
        self.start()

    def record(self, code: Any, manager: Any) -> None:
        """Note a guard manager install() built for stored code of `code`."""
        if self.on_compile is not None:
            self._managers.setdefault(code, []).append(manager)

    def _apply(self) -> None:
        from torch._dynamo import convert_frame

        compile_frame = convert_frame._compile
        signature = inspect.signature(compile_frame)
        watch = self

        @functools.wraps(compile_frame)
        def _compile(code: Any, globals: Any, locals: Any, *args: Any, **kwargs: Any) -> Any:
            managers = watch._managers.get(code)
            if managers and watch.on_compile is not None:
                try:
                    past_limit = _past_limit(signature, (code, globals, locals, *args), kwargs)
                    watch.on_compile(code, locals, managers, past_limit)
                except Exception:  # explaining must never break a compile
                    log.debug("explaining a stored-code compile failed", exc_info=True)
            return compile_frame(code, globals, locals, *args, **kwargs)

        self._replace(convert_frame, "_compile", _compile)

    def _stopped(self) -> None:
        # The next installation watches only what it installs: a code this
        # one loaded for, compiled under another store, is no stored-code miss.
        self.on_compile = None
        self._managers.clear()

    def forget(self, code: Any) -> None:
        self._managers.pop(code, None)


stored_code_watch = _StoredCodeWatch()


def _past_limit(signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The limit a `convert_frame._compile(*args, **kwargs)` call is past, by
    Dynamo's own check (with loaded variants counted, see `recompile_limit`),
    named with its value; None where it compiles, or where this torch's
    `_compile` takes no cache size and compile id."""
    from torch._dynamo import config, convert_frame

    try:
        arguments = signature.bind(*args, **kwargs).arguments
        # The name as `_compile` looks it up, so a wrap of it (ours) applies.
        exceeds = vars(convert_frame)["exceeds_recompile_limit"]
        exceeded, limit_type = exceeds(arguments["cache_size"], arguments["compile_id"])
    except (TypeError, KeyError, AssertionError):
        return None
    return f"{limit_type} ({getattr(config, limit_type)})" if exceeded else None


class _UnbuildableGuards(_Patch):
    """A stored variant whose guards cannot be built here refuses every call.

    `CompilePackage.install` builds each stored variant's guard manager when
    `torch.compile` wraps the function. A guard source that walks a live
    object saved by reference (a class attribute holding a registry, whose
    keys Dynamo guards by position: `list(dict.keys(...))[2]`) can fail to
    evaluate in a process that has not filled it yet; torch then abandons
    the whole install, and every frame and variant of the entry compiles.
    While installed, such a variant gets a guard manager that rejects every
    call and names the error: the entry's other variants install as stored,
    and a call only that variant would have served compiles, as on a guard
    failure (`precompile explain` names the variant and the error). Every
    stored variant's manager is built here in one pass
    (`_stored_guards_built_once`). Building
    it later, on a call, is not done: the rebuilt guards would take their
    expected values from whatever the live object holds then. A variant whose
    guard state found module or class data changed since the save (`_named_reads`) is
    refused the same way, before torch builds guards that would expect the
    new values.

    Torch versions: 2.11 and newer: every release abandons the whole install
    when one variant's guards fail to build.
    Steps aside: never; `package.load_guard_manager` is wrapped on every torch,
    and a manager that builds is returned as torch built it.
    """

    def _apply(self) -> None:
        from torch._dynamo.guards import GuardManagerWrapper

        load_guard_manager = dynamo_package.load_guard_manager

        def refusing(why: str) -> Any:
            counters["precompile"]["variants_unbuildable"] += 1
            manager = GuardManagerWrapper()
            manager.root.add_lambda_guard(_refuse, [f"precompile: these stored guards {why}"], None)
            return manager

        def build(guards_state: Any, target_code: Any, *args: Any, **kwargs: Any) -> Any:
            changed = getattr(guards_state, "precompile_changed", None)
            if changed:
                return refusing(f"were not built: {'; '.join(changed[:3])}")
            if not served_entries.installing_now():
                return load_guard_manager(guards_state, target_code, *args, **kwargs)
            try:
                with _stored_guards_built_once():
                    return load_guard_manager(guards_state, target_code, *args, **kwargs)
            except Exception as e:
                log.debug("the guards of a stored variant of %s cannot be built", target_code.co_name, exc_info=True)
                return refusing(f"could not be built at install ({type(e).__name__}: {e})")

        # The one wrapper of torch's function: explain's watch is told of
        # every manager it returns for a store entry, refusing ones
        # included, so `explain` names why a refused variant did not serve.
        # Another install (a package a caller installs by hand) builds as
        # torch does and raises what torch raises; only stale module or
        # class data still refuses, since its guards would pass stale code.
        @functools.wraps(load_guard_manager)
        def _load_guard_manager(guards_state: Any, target_code: Any, *args: Any, **kwargs: Any) -> Any:
            manager = build(guards_state, target_code, *args, **kwargs)
            if served_entries.installing_now():
                stored_code_watch.record(target_code, manager)
            return manager

        self._replace(dynamo_package, "load_guard_manager", _load_guard_manager)


def _refuse(*_: Any) -> bool:
    return False


unbuildable_guards = _UnbuildableGuards()


def guard_failures(manager: Any, f_locals: dict[str, Any]) -> list[str]:
    """The guards of `manager` that `f_locals` fails, in torch's verbose words."""
    result = manager.check_verbose(f_locals)
    if result.result:
        return []
    return [str(p) for p in result.verbose_code_parts]


def changed_sources(dynamo_entry: Any) -> list[str]:
    """What of `dynamo_entry`'s source differs here: inlined source ranges, and
    generated codes (`_generated_code_changed`) of codes that install.

    The check `CompilePackage.initialize` makes (and raises on), made first,
    and the one torch cannot make for code without a source file. Raises
    where a module the entry names does not import.
    """
    changed = []
    for src in dynamo_entry.source_info.inlined_sources:
        module = importlib.import_module(src.module)
        if dynamo_package._hash_sourcelines(module, src.firstlineno, src.lastlineno) != src.checksum:
            changed.append(f"{src.module} lines {src.firstlineno}-{src.lastlineno}")
    for code_entry in dynamo_entry.codes:
        if not code_entry.bypassed and (why := _generated_code_changed(code_entry)) is not None:
            changed.append(why)
    return sorted(changed)


def _generated_code_changed(code_entry: Any) -> str | None:
    """Why `code_entry`'s generated code is not the one its path reaches here, or None.

    Only a code `exec` generated (file "<string>") is compared: a code from a
    source file has its source hashed. The stored code must be the live one,
    instruction for instruction, or its compiled variants were traced from
    another function.
    """
    stored = code_entry.python_code
    if not code_entry.code_source or not object_paths.generated(stored.co_filename):
        return None
    importlib.import_module(code_entry.python_module)
    path = f"{code_entry.python_module}.{code_entry.function_names[0]}"
    try:
        live = dynamo_package._lookup_code(code_entry)
    except Exception as e:
        return f"{path} is not found here ({type(e).__name__}: {e})"
    if dynamo_package.SerializedCode.from_code_object(live) != stored:
        return f"{path} generates other code here than when it was compiled"
    return None


class _GuardPasses(_Patch):
    """`CheckFunctionManager`'s two guard passes, as one pass would build.

    With `caching_precompile` on, `CheckFunctionManager` builds the same
    `Guard` objects twice (a pass to evaluate its filter, then the real one).

    - A guard records a weak reference to the object it checks and asserts
      that a later record names the same object while the first is alive.
      A source that yields a new object on every evaluation (a property
      that returns a fresh view, as transformers' `config.per_layer_config`
      does on Llama-family models) then fails the second pass: torch 2.11
      raises AssertionError out of the user's call. While installed, each
      build starts with no recorded object, as a build without a filter
      pass does; the identity check still holds within a build. No guard is
      dropped or changed: the record is only export and debug information.
    - While a stored guard state loads on a torch whose config patches are
      global (see `_stored_guards_built_once`), the second pass is the
      first one's build when the filter kept every guard: the same guards,
      in the same order, for the same frame and scope. Otherwise it builds.

    Torch versions: the first half wherever `Guard` records `obj_weakref`
    (2.11 and newer, 2.15 included); the second only where config patches
    are process-wide (2.11).
    Steps aside: `_apply` replaces nothing where `Guard` has no `obj_weakref`
    and config patches are per-thread (`STORED_GUARDS_BUILT_ONCE`), or where
    `build_guards` is missing.
    """

    def _apply(self) -> None:
        from torch._dynamo.guards import CheckFunctionManager
        from torch._guards import Guard

        original = CheckFunctionManager.__dict__.get("build_guards")
        forget_objects = hasattr(Guard, "obj_weakref")
        if original is None or not (forget_objects or not STORED_GUARDS_BUILT_ONCE):
            return  # a torch that builds guards another way, or needs neither

        @functools.wraps(original)
        def build_guards(manager: Any, *args: Any, **kwargs: Any) -> Any:
            # (sorted_guards, existing_diff_guard_sources, f_code, output_graph,
            # save_guards); only the real pass passes guard_filter_fn.
            memo = getattr(_stored_build, "memo", None)
            if memo is not None and args and "guard_filter_fn" in kwargs:
                held = memo.pop("filter", None)
                # The same manager, guard objects and arguments: the same build.
                if held is not None and held[0] is manager and _identical(held[1], args):
                    return held[2]
            if forget_objects:
                for guard in args[0] if args else kwargs.get("sorted_guards", ()):
                    guard.obj_weakref = None
            result = original(manager, *args, **kwargs)
            if memo is not None and args and "guard_filter_fn" not in kwargs:
                memo["filter"] = (manager, args, result)
            return result

        self._replace(CheckFunctionManager, "build_guards", build_guards)


def _identical(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Two build_guards argument tuples naming the same objects, the guard
    lists (the first argument) element by element."""
    return (
        len(a) == len(b)
        and len(a[0]) == len(b[0])
        and all(x is y for x, y in zip(a[0], b[0]))
        and all(x is y for x, y in zip(a[1:], b[1:]))
    )


guard_passes = _GuardPasses()
