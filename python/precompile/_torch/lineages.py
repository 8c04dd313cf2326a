"""Wrapper lineages: two `torch.compile` wrappers of one function keep their own entries.

torch files every package of a function under one key (`source_id`: its
qualified name and first line), and `record_package` keeps the last package
recorded under a key. Two wrappers of one function in one process
(`torch.compile(f)` and `torch.compile(f, dynamic=True)`, one model class
compiled with two backends or modes) each compile their own package, and
torch saves only the last: the other wrapper's graphs are lost, and in a later
process the saved wrapper's graphs serve both.

A wrapper's *lineage* is what torch compares when it decides whether a
compiled frame may serve a call: its backend (torch's BACKEND_MATCH: for
`torch.compile`, the Inductor config, mode and options, or the backend's name
and arguments, and `dynamic`), plus `fullgraph`. The lineage's tag is a
digest of that description; the entry key is `source_id` for the plain
`torch.compile(f)` lineage (the key torch itself uses, so stores written
before lineages keep serving it) and `<source_id>-<tag>` for any other.

In the loading process one more thing keeps the lineages apart: torch
installs a loaded package's variants as the code object's *precompile
entries*, one pool per code object that Dynamo consults before its own cache
and without its backend check, and installing a package empties the pool
first. Each wrapper therefore re-installs its own variants (the guard
managers built at its install, not rebuilt) when a call enters it and the
pool holds another wrapper's.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import logging
import threading
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch._C._dynamo.eval_frame as c_eval_frame
import torch._dynamo.eval_frame as eval_frame
from torch._dynamo.package import CompilePackage

from .patch import _Patch

log = logging.getLogger(__name__)

# The lineage of the wrapper whose `__call__` is loading an entry now; None
# outside every wrapper (torch's `DynamoCache.load_and_install_package(fn)`
# called by hand, as torch's own tests do).
_loading_tag: contextvars.ContextVar[str | None] = contextvars.ContextVar("precompile_lineage", default=None)


def describe_backend(backend: Any) -> str:
    """A description of a `torch.compile` backend that is the same in every
    process for an equal backend (torch's own `__eq__` for its wrappers).

    A value whose text names a memory address (an object passed in options
    without a stable repr) makes the description differ in every process:
    its entries then never load elsewhere, a miss rather than a wrong hit.
    """
    config = getattr(backend, "config", None)
    if type(backend).__name__ == "_TorchCompileInductorWrapper" and isinstance(config, dict):
        return repr(("inductor", sorted(config.items()), backend.dynamic, getattr(backend, "name", None)))
    name = getattr(backend, "compiler_name", None)
    if type(backend).__name__ == "_TorchCompileWrapper" and isinstance(name, str):
        kwargs = getattr(backend, "kwargs", {})
        return repr(("backend", name, sorted(kwargs.items()), backend.dynamic, getattr(backend, "name", None)))
    qualname = getattr(backend, "__qualname__", None)
    if isinstance(qualname, str):
        return repr(("callable", getattr(backend, "__module__", None), qualname))
    return repr(("object", type(backend).__module__, type(backend).__qualname__))


def context_lineage(context: Any) -> str:
    """The lineage description of a torch.compile wrapper (its Dynamo context)."""
    callback = getattr(context, "callback", None)
    backend = eval_frame.innermost_backend(callback) if callback is not None else None
    return repr((describe_backend(backend), bool(getattr(context, "fullgraph", False))))


@functools.cache
def _default_description() -> str:
    # What plain `torch.compile(f)` describes itself as, computed once on
    # first use (building an Inductor wrapper reads torch's config).
    import torch

    backend = torch._TorchCompileInductorWrapper(None, None, None)
    return repr((describe_backend(backend), False))


def tag_of(description: str) -> str:
    """The lineage tag: 16 hex digits of the description's sha256; empty for
    plain `torch.compile(f)`."""
    digest = hashlib.sha256(description.encode()).hexdigest()[:16]
    return "" if description == _default_description() else digest


def lineage_key(source_id: str, tag: str) -> str:
    """The entry key of a function's lineage: torch's key, suffixed by a non-default tag."""
    return f"{source_id}-{tag}" if tag else source_id


def source_id_of_key(key: str) -> str:
    """torch's key of the function an entry key names."""
    return key.split("-", 1)[0]


class _WrapperLineages(_Patch):
    """Keeps the entries of two `torch.compile` wrappers of one function apart.

    torch's `record_package` keeps one package per function, so a second
    wrapper's compile replaces the first's and only the last is saved; loaded
    in a later process, the saved wrapper's graphs serve both wrappers (a
    `dynamic=True` graph serving a static wrapper, an `eager` one serving
    Inductor). While installed, each wrapper's package is filed under its
    lineage's key (`lineage_key`), each wrapper loads its own, and a call
    entering a wrapper finds that wrapper's loaded variants on the code.

    Torch versions: 2.11 and newer (torch files by `source_id` only).
    Steps aside: `_apply` replaces nothing where `_TorchDynamoContext` has no
    `__call__` of its own or the C module has no `_load_precompile_entry`.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        # package -> lineage tag, for the packages of wrappers seen.
        self._tags: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        # package -> what its install loaded: (code, guard manager, compiled code).
        self._loaded: weakref.WeakKeyDictionary[Any, list[tuple[types.CodeType, Any, types.CodeType]]] = (
            weakref.WeakKeyDictionary()
        )
        # code -> the package whose variants its precompile entries hold now.
        self._owner: weakref.WeakKeyDictionary[types.CodeType, weakref.ref[Any]] = weakref.WeakKeyDictionary()
        self._installing: Any = None
        # The wrapper whose variants every code it loaded holds since the
        # last install or swap: entering it again needs no check. Every call
        # of a compiled function enters its wrapper, so this is the hot path.
        self._settled: weakref.ref[Any] | None = None
        # Bumped by every install and swap; package -> the count when its
        # codes last held its lineage's variants. Wrappers of one lineage
        # called in turn (blocks compiled by `Module.compile()`) each find
        # theirs unchanged without a check.
        self._generation = 0
        self._checked: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()

    def tag(self, package: Any) -> str:
        """The lineage tag of the wrapper `package` belongs to ("" if default or unknown)."""
        with self._lock:
            return self._tags.get(package, "")

    def _apply(self) -> None:
        context_cls = eval_frame._TorchDynamoContext
        if "__call__" not in vars(context_cls) or not hasattr(c_eval_frame, "_load_precompile_entry"):
            return
        original_call = vars(context_cls)["__call__"]
        original_install = vars(CompilePackage)["install"]
        hook = self

        @functools.wraps(original_call)
        def __call__(context: Any, fn: Any) -> Any:
            package = getattr(context, "_package", None)
            if package is None:
                return original_call(context, fn)
            try:
                tag = tag_of(context_lineage(context))
            except Exception:  # an undescribable backend: torch's own key and behaviour
                log.debug("describing a torch.compile backend", exc_info=True)
                tag = ""
            with hook._lock:
                first = package not in hook._tags
                hook._tags[package] = tag
            if first:
                hooks = getattr(context, "enter_exit_hooks", None)
                if isinstance(hooks, list):
                    hooks.append(functools.partial(hook._entering, weakref.ref(package)))
            token = _loading_tag.set(tag)
            try:
                return original_call(context, fn)
            finally:
                _loading_tag.reset(token)

        @functools.wraps(original_install)
        def install(package: Any, backends: Any) -> None:
            with hook._recording(package):
                original_install(package, backends)

        self._replace(context_cls, "__call__", __call__)
        self._replace(CompilePackage, "install", install)

    @contextlib.contextmanager
    def _recording(self, package: Any) -> Iterator[None]:
        """Record what `package`'s install loads onto code objects."""
        loaded: list[tuple[types.CodeType, Any, types.CodeType]] = []
        original = c_eval_frame._load_precompile_entry

        def _load_precompile_entry(code: types.CodeType, guard_manager: Any, dynamo_code: types.CodeType) -> Any:
            loaded.append((code, guard_manager, dynamo_code))
            return original(code, guard_manager, dynamo_code)

        c_eval_frame._load_precompile_entry = _load_precompile_entry
        try:
            yield
        finally:
            c_eval_frame._load_precompile_entry = original
            own = _own_code(package)
            # torch's install empties the function's own code's pool first.
            codes = [code for code, _, _ in loaded] + ([own] if own is not None else [])
            by_hand = outside_wrapper()
            with self._lock:
                self._settled = None
                self._generation += 1
                self._loaded[package] = loaded
                ref = weakref.ref(package)
                for code in codes:
                    if by_hand:
                        # Installed outside every wrapper: as in torch, the
                        # pool serves whichever wrapper calls the code next,
                        # and no wrapper's entering swaps it for its own.
                        self._owner.pop(code, None)
                    else:
                        self._owner[code] = ref

    def _entering(self, package_ref: weakref.ref[Any]) -> Callable[[], None]:
        """On entering a wrapper: its loaded variants are the ones its codes hold."""
        if self._settled is package_ref:
            return _nothing
        package = package_ref()
        if package is not None and self._checked.get(package) == self._generation:
            self._settled = package_ref
        elif package is not None:
            try:
                self._hold(package)
                self._settled = package_ref
            except Exception:  # a failed swap leaves torch's pool: the call compiles or is served as torch would
                log.debug("re-installing a wrapper's loaded variants", exc_info=True)
        return _nothing

    def _hold(self, package: Any) -> None:
        """Make the precompile entries of `package`'s codes its own: those its
        install loaded, or none (a wrapper that loaded nothing compiles, and
        must not be served another wrapper's variants)."""
        own = _own_code(package)
        with self._lock:
            loaded = self._loaded.get(package, [])
            codes = {code for code, _, _ in loaded}
            if own is not None:
                codes.add(own)
            tag = self._tags.get(package, "")
            # A code no wrapper loaded onto holds no precompile entries; one
            # another wrapper of this lineage loaded onto holds the variants
            # of this lineage's entry, which Dynamo's own cache would share
            # between the two.
            stale = {
                code
                for code in codes
                if code in self._owner and not self._serves(self._owner[code](), package, tag, code)
            }
            if stale:
                self._generation += 1
                for code in stale:
                    c_eval_frame._reset_precompile_entries(code)
                    self._owner[code] = weakref.ref(package)
                for code, guard_manager, dynamo_code in loaded:
                    if code in stale:
                        c_eval_frame._load_precompile_entry(code, guard_manager, dynamo_code)
            self._checked[package] = self._generation

    def _serves(self, owner: Any, package: Any, tag: str, code: types.CodeType) -> bool:
        """Whether the variants `owner` put on `code` serve `package`: its own,
        or those of a wrapper of the same lineage that loaded onto `code` if
        and only if `package` did (both hold that lineage's entry there, or
        neither holds any). Called under `_lock`."""
        if owner is package:
            return True
        if owner is None or self._tags.get(owner) != tag:
            return False
        return _loaded_onto(self._loaded.get(owner, ()), code) == _loaded_onto(self._loaded.get(package, ()), code)

    def _stopped(self) -> None:
        with self._lock:
            self._tags = weakref.WeakKeyDictionary()
            self._loaded = weakref.WeakKeyDictionary()
            self._owner.clear()
            self._checked = weakref.WeakKeyDictionary()
            self._settled = None


def _own_code(package: Any) -> types.CodeType | None:
    """The code of the function a package was made for, once initialized."""
    code = getattr(getattr(package, "_innermost_fn", None), "__code__", None)
    return code if isinstance(code, types.CodeType) else None


def _loaded_onto(loaded: Any, code: types.CodeType) -> bool:
    """Whether an install that loaded `loaded` put variants on `code`."""
    return any(target is code for target, _, _ in loaded)


def _nothing() -> None:
    return None


wrapper_lineages = _WrapperLineages()


def package_key(package: Any) -> str:
    """The entry key a package is filed under: its function's, for its wrapper's lineage."""
    return lineage_key(package.source_id, wrapper_lineages.tag(package))


def loading_key(fn: Callable[..., Any]) -> str:
    """The entry key `fn` is looked up under by the wrapper loading it now
    (torch's own key outside every wrapper)."""
    return lineage_key(CompilePackage.source_id_from_fn(fn), loading_tag())


def loading_tag() -> str:
    """The lineage tag of the wrapper loading an entry now ("" outside every one)."""
    return _loading_tag.get() or ""


def outside_wrapper() -> bool:
    """Whether the load or install running now was called outside every
    `torch.compile` wrapper: by hand, through torch's `DynamoCache` API."""
    return _loading_tag.get() is None
