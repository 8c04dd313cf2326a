"""The torch adapter: the one place that names torch internals.

Everything precompile needs from torch's private modules is imported or
patched in this package, one module per torch subsystem, so that a difference
between torch releases is handled once. The rest of precompile imports from
here and gets plain values; `tests/test_adapter_boundary.py` holds it to that.
Each patch (`registry.patches()`) says in its docstring what torch lacks,
which versions need it and how it steps aside. Supported: torch >= 2.11.
"""

from __future__ import annotations

# First: it imports torch's remote cache with its Redis client deferred, before
# the modules below import Inductor's cache (see deferred_imports).
from . import deferred_imports  # noqa: F401
from .aliases import alias_target, module_alias_recorder, object_aliases
from .backward import BackwardFailure, compile_pending, pending_backwards
from .bypass_reasons import bypass_reasons
from .callables import callable_objects
from .class_body import lookup_deferred
from .classes import (
    BackendCacheArtifact,
    BundledAOTAutogradCacheArtifact,
    BundledAOTAutogradResult,
    CompilePackage,
    DynamoCacheEntry,
    DynamoStore,
    PackageError,
    PrecompileCacheEntry,
    PrecompileContext,
    SerializedGraphModule,
    TritonBundle,
    TritonKernelArtifact,
    TritonKernelArtifacts,
    _DynamoCacheEntry,
    counters,
)
from .coordesc import coordesc_winners
from .coordesc import with_winners as with_coordesc_winners
from .ddp_frames import ddp_optimizer_frames
from .dynamo_cache import (
    bypassed_copy,
    caches_disabled,
    check_loaded_entry,
    debug_info,
    default_dynamo_dir,
    entry_source_location,
    guarded_variants,
    innermost_fn,
    loaded_variant_count,
    package_function,
    recompiles_log,
    record_for_mega_cache,
    recorded_backends,
    recorded_entries,
    save_to_dynamo_cache,
    set_caching_precompile,
    source_id_from_fn,
    swap_dynamo_cache,
)
from .frames import comprehension_functions, device_type_union, source_pickling, unbound_global_names, unnamed_frames
from .graphs import (
    GRAPH_JSON_FIELDS,
    GRAPH_TIME_FIELDS,
    TRITON_BUNDLE_FIELD,
    CompiledFxGraph,
    set_triton_bundle,
    triton_bundle,
)
from .guard_fake_mode import guard_state_fake_mode
from .guard_state import (
    guard_state_dump_errors,
    guard_state_handoff,
    guard_state_reducers,
    load_guards_state,
    unpickle_guards_state,
)
from .guards import (
    STORED_GUARDS_BUILT_ONCE,
    changed_sources,
    guard_evaluation,
    guard_failures,
    guard_passes,
    stored_code_watch,
    unbuildable_guards,
)
from .hashes import InstallHash, install_hashes
from .install import (
    InstallFailed,
    backend_capture,
    backend_setup_gc,
    deferred_full_gc,
    install_hardening,
    served_entries,
)
from .kernels import (
    TRITON_REPLACE_BYTES,
    autotune_capture,
    in_process_kernel_loads,
    inductor_cache_dir,
    kernel_capture,
    local_static_autotuners,
    picklable_triton_bundle,
    portable_static_autotuners,
    put_triton_cache_file,
    register_library,
    triton_cache_dir,
)
from .lineage_entries import shared_lineage_entries
from .lineages import lineage_key, loading_key, outside_wrapper, package_key, source_id_of_key, wrapper_lineages
from .local_classes import local_class_type_guards
from .named_guards import named_class_guards, script_function_type_guards
from .own_frames import own_frames_skipped
from .patch import _Patch
from .probes import (
    TORCH_MARKS_PROBES,
    _ProbeLoadCheck,
    isa_probe_libraries,
    marked_probe_lookup,
    probe_load_marks,
    torch_marks_loaded_probes,
)
from .registry import PatchStatus, patches, patches_off, report, start_all, stop_all
from .single_flight import mode_from_env as single_flight_mode_from_env
from .single_flight import note_miss, single_flight
from .single_flight import timeout_from_env as single_flight_timeout_from_env
from .templates import lazy_kernel_templates
from .versions import (
    NEWEST_TESTED,
    OLDEST_SUPPORTED,
    TORCH_GIT,
    TORCH_VERSION,
    TRITON_VERSION,
    accelerator_capability,
    check_torch_version,
    cpu_capability,
    initialized_accelerators,
    startable_accelerators,
)

__all__ = [
    "_DynamoCacheEntry",
    "_Patch",
    "_ProbeLoadCheck",
    "accelerator_capability",
    "alias_target",
    "autotune_capture",
    "backend_capture",
    "backend_setup_gc",
    "BackendCacheArtifact",
    "BackwardFailure",
    "BundledAOTAutogradCacheArtifact",
    "BundledAOTAutogradResult",
    "coordesc_winners",
    "bypassed_copy",
    "caches_disabled",
    "check_torch_version",
    "changed_sources",
    "check_loaded_entry",
    "CompiledFxGraph",
    "CompilePackage",
    "compile_pending",
    "comprehension_functions",
    "counters",
    "cpu_capability",
    "ddp_optimizer_frames",
    "own_frames_skipped",
    "debug_info",
    "default_dynamo_dir",
    "deferred_full_gc",
    "device_type_union",
    "DynamoCacheEntry",
    "DynamoStore",
    "entry_source_location",
    "GRAPH_JSON_FIELDS",
    "GRAPH_TIME_FIELDS",
    "guard_evaluation",
    "guard_failures",
    "guard_passes",
    "guard_state_dump_errors",
    "guard_state_fake_mode",
    "guard_state_handoff",
    "guard_state_reducers",
    "guarded_variants",
    "in_process_kernel_loads",
    "initialized_accelerators",
    "note_miss",
    "single_flight",
    "single_flight_mode_from_env",
    "single_flight_timeout_from_env",
    "startable_accelerators",
    "inductor_cache_dir",
    "innermost_fn",
    "install_hardening",
    "install_hashes",
    "InstallFailed",
    "InstallHash",
    "isa_probe_libraries",
    "kernel_capture",
    "lazy_kernel_templates",
    "load_guards_state",
    "loaded_variant_count",
    "module_alias_recorder",
    "named_class_guards",
    "object_aliases",
    "package_function",
    "PackageError",
    "patches",
    "patches_off",
    "pending_backwards",
    "PatchStatus",
    "local_static_autotuners",
    "picklable_triton_bundle",
    "portable_static_autotuners",
    "PrecompileCacheEntry",
    "PrecompileContext",
    "probe_load_marks",
    "marked_probe_lookup",
    "put_triton_cache_file",
    "recompiles_log",
    "record_for_mega_cache",
    "recorded_backends",
    "recorded_entries",
    "register_library",
    "report",
    "save_to_dynamo_cache",
    "script_function_type_guards",
    "local_class_type_guards",
    "SerializedGraphModule",
    "served_entries",
    "set_caching_precompile",
    "set_triton_bundle",
    "source_id_from_fn",
    "lineage_key",
    "loading_key",
    "lookup_deferred",
    "outside_wrapper",
    "package_key",
    "source_id_of_key",
    "wrapper_lineages",
    "shared_lineage_entries",
    "callable_objects",
    "bypass_reasons",
    "source_pickling",
    "start_all",
    "stop_all",
    "stored_code_watch",
    "STORED_GUARDS_BUILT_ONCE",
    "swap_dynamo_cache",
    "torch_marks_loaded_probes",
    "TORCH_MARKS_PROBES",
    "NEWEST_TESTED",
    "OLDEST_SUPPORTED",
    "TORCH_GIT",
    "TORCH_VERSION",
    "triton_bundle",
    "TRITON_BUNDLE_FIELD",
    "triton_cache_dir",
    "TRITON_REPLACE_BYTES",
    "TRITON_VERSION",
    "TritonBundle",
    "TritonKernelArtifact",
    "TritonKernelArtifacts",
    "unbound_global_names",
    "unbuildable_guards",
    "unnamed_frames",
    "unpickle_guards_state",
    "with_coordesc_winners",
]
