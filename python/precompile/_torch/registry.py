"""Every patch `install()` starts, in start order, and what each is doing on this torch.

Patches start in the order below and stop in reverse: where two patches wrap
one attribute (`serialize_guards` five, `CompilePackage.install` three), each
puts back what it found.

`PRECOMPILE_PATCHES_OFF=name,name` leaves the named patches unstarted, to see
what torch does without one of them (a diagnosis aid: the store may then miss
or bypass frames that patch makes storable). An unknown name raises
`ValueError` at install.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from . import deferred_imports
from .aliases import module_alias_recorder, object_aliases
from .autotune_reuse import autotune_reuse
from .backward import pending_backwards
from .bypass_reasons import bypass_reasons
from .callables import callable_objects
from .class_body import class_body_methods
from .coordesc import coordesc_winners
from .ddp_frames import ddp_optimizer_frames
from .dynamo_cache import save_to_dynamo_cache
from .frames import comprehension_functions, device_type_union, source_pickling, unbound_global_names, unnamed_frames
from .guard_dispatch_tls import guard_dispatch_tls
from .guard_fake_mode import guard_state_fake_mode
from .guard_logs import dropped_guard_notes
from .guard_state import guard_state_dump_errors, guard_state_handoff, guard_state_reducers
from .guards import guard_evaluation, guard_passes, unbuildable_guards
from .identity_guards import identity_guards
from .install import backend_capture, backend_setup_gc, install_hardening
from .kernels import autotune_capture, kernel_capture
from .lambda_guard_scope import lambda_guard_scope
from .lean_config import lean_backend_config
from .lean_debug import lean_backend_debug
from .lean_imports import lean_cached_graph_imports
from .lean_pickled_globals import lean_pickled_globals
from .lineage_entries import shared_lineage_entries
from .lineages import wrapper_lineages
from .local_classes import local_class_type_guards
from .named_guards import named_class_guards, script_function_type_guards
from .op_free_graphs import noop_graph_backends, op_free_graphs
from .own_frames import own_frames_skipped
from .parametrized import parametrized_type_guards
from .patch import OFF_ENV, _Patch, names_turned_off
from .probes import marked_probe_lookup, probe_load_marks
from .recompile_limit import loaded_variants_counted
from .single_flight import single_flight
from .templates import lazy_kernel_templates

__all__ = ["OFF_ENV", "PatchStatus", "patches", "patches_off", "report", "start_all", "stop_all"]


_PATCHES: tuple[tuple[str, _Patch], ...] = (
    ("own_frames_skipped", own_frames_skipped),
    ("save_to_dynamo_cache", save_to_dynamo_cache),
    ("kernel_capture", kernel_capture),
    ("probe_load_marks", probe_load_marks),
    ("marked_probe_lookup", marked_probe_lookup),
    ("autotune_capture", autotune_capture),
    ("autotune_reuse", autotune_reuse),
    ("coordesc_winners", coordesc_winners),
    ("guard_evaluation", guard_evaluation),
    ("backend_capture", backend_capture),
    ("bypass_reasons", bypass_reasons),
    ("pending_backwards", pending_backwards),
    ("object_aliases", object_aliases),
    ("install_hardening", install_hardening),
    ("unbuildable_guards", unbuildable_guards),
    ("source_pickling", source_pickling),
    ("unbound_global_names", unbound_global_names),
    ("lazy_kernel_templates", lazy_kernel_templates),
    ("backend_setup_gc", backend_setup_gc),
    ("guard_state_handoff", guard_state_handoff),
    ("guard_state_fake_mode", guard_state_fake_mode),
    ("named_class_guards", named_class_guards),
    ("guard_passes", guard_passes),
    ("guard_state_reducers", guard_state_reducers),
    ("script_function_type_guards", script_function_type_guards),
    ("local_class_type_guards", local_class_type_guards),
    ("guard_state_dump_errors", guard_state_dump_errors),
    ("module_alias_recorder", module_alias_recorder),
    ("unnamed_frames", unnamed_frames),
    ("comprehension_functions", comprehension_functions),
    ("device_type_union", device_type_union),
    ("dropped_guard_notes", dropped_guard_notes),
    ("lean_backend_config", lean_backend_config),
    ("lean_backend_debug", lean_backend_debug),
    ("lean_cached_graph_imports", lean_cached_graph_imports),
    ("lean_pickled_globals", lean_pickled_globals),
    ("parametrized_type_guards", parametrized_type_guards),
    # Before the lineages: their wrapper sets the lineage tag this lookup keys by.
    ("callable_objects", callable_objects),
    ("wrapper_lineages", wrapper_lineages),
    ("shared_lineage_entries", shared_lineage_entries),
    ("identity_guards", identity_guards),
    ("op_free_graphs", op_free_graphs),
    ("noop_graph_backends", noop_graph_backends),
    ("loaded_variants_counted", loaded_variants_counted),
    ("lambda_guard_scope", lambda_guard_scope),
    ("guard_dispatch_tls", guard_dispatch_tls),
    ("class_body_methods", class_body_methods),
    ("single_flight", single_flight),
    ("ddp_optimizer_frames", ddp_optimizer_frames),
)

# Names left unstarted by the last `start_all` (from `OFF_ENV`).
_turned_off: frozenset[str] = frozenset()
_started = False


@dataclasses.dataclass(frozen=True)
class PatchStatus:
    """One registered patch as `report()` sees it."""

    name: str
    active: bool
    # The first line of the patch's docstring: what torch lacks or does wrong.
    summary: str
    # Why an inactive patch is inactive; empty while active.
    reason: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def patches() -> tuple[tuple[str, _Patch], ...]:
    """(name, patch) for every patch, in start order."""
    return _PATCHES


def patches_off() -> frozenset[str]:
    """The patch names `OFF_ENV` turns off; ValueError for a name no patch has."""
    names = names_turned_off()
    # `deferred_clients` acts when this package is imported, not at install.
    unknown = sorted(names - {name for name, _ in _PATCHES} - {deferred_imports.NAME})
    if unknown:
        raise ValueError(f"{OFF_ENV} names no patch called {', '.join(unknown)}")
    return names


def start_all(
    *,
    off: frozenset[str] = frozenset(),
    save: Callable[[], dict[str, Any]],
    on_install_failure: Callable[[Any, BaseException], None],
    on_unnamed: Callable[[Any, BaseException], None],
) -> None:
    """Start every patch not turned off, in order, with the store's callbacks."""
    global _turned_off, _started
    save_to_dynamo_cache.set_save(save)
    install_hardening.set_on_failure(on_install_failure)
    unnamed_frames.set_on_unnamed(on_unnamed)
    for name, patch in _PATCHES:
        if name not in off:
            patch.start()
    _turned_off = off
    _started = True


def stop_all() -> None:
    """Stop every patch, last started first."""
    global _started
    for _, patch in reversed(_PATCHES):
        patch.stop()
    _started = False


def report() -> list[PatchStatus]:
    """Each patch in start order: active or not, and why not."""
    statuses = []
    for name, patch in _PATCHES:
        doc = (type(patch).__doc__ or "").strip().splitlines()
        if patch.active:
            reason = ""
        elif not _started:
            reason = "not installed"
        elif name in _turned_off:
            reason = f"turned off by {OFF_ENV}"
        else:
            reason = "this torch needs no adaptation"
        statuses.append(PatchStatus(name, patch.active, doc[0] if doc else "", reason))
    return statuses
