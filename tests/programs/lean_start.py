"""A served warm start, and what it imported, run as a subprocess.

    python lean_start.py compile|serve|contract STORE OUT_JSON

`compile` compiles a small MLP into STORE and saves; `serve` (a fresh
process with a fresh Inductor cache) runs it from the store, records the
modules imported by then, then compiles a function the store does not hold;
`contract` checks the stand-ins the lean start uses against torch's own.
Each writes what it saw to OUT_JSON.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import torch

import precompile

phase, store, out_path = sys.argv[1:4]
precompile.install(store, save_on_exit=False)
redis_at_install = "redis" in sys.modules
from torch._dynamo.utils import counters  # noqa: E402


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def new_frame(x: torch.Tensor) -> torch.Tensor:
    return torch.mm(x, x.t()).relu() + x.sum()


torch.manual_seed(0)
model = MLP()
x = torch.randn(8, 64)
out: dict = {}
if phase == "contract":
    from precompile._torch.lean_imports import TORCH_EXTERN_KERNELS, extern_kernels
    from precompile._torch.registry import lean_cached_graph_imports

    # The backend config as the lean start takes it, then torch's own.
    ours = {}
    for mode, options in ((None, None), ("max-autotune-no-cudagraphs", None), (None, {"epilogue_fusion": False})):
        wrapper = torch._TorchCompileInductorWrapper(mode, options, None)
        ours[str((mode, options))] = (wrapper, wrapper.get_compiler_config())
    served = {name: getattr(extern_kernels, name) for name in sorted(TORCH_EXTERN_KERNELS)}
    flags = {name: getattr(torch._inductor.debug, name) for name in ("RECORD_GRAPH_EXECUTION", "GRAPH_EXECUTION_ORDER")}
    out["debug_imported_by_flags"] = "torch._inductor.debug" in sys.modules
    # While a cached graph is served, only the cache hit's own import of
    # GraphLowering gets the stand-in; a module first imported then (the
    # compiler, on a GPU host) binds the real class.
    out["graph_imported_before"] = "torch._inductor.graph" in sys.modules
    with lean_cached_graph_imports._window():
        hit: dict = {}
        exec(
            "from .graph import GraphLowering",
            {"__name__": "torch._inductor.codecache", "__package__": "torch._inductor"},
            hit,
        )
        import torch._inductor.compile_fx as compile_fx_module
    real_graph = sys.modules["torch._inductor.graph"]
    out["cache_hit_got_stand_in"] = hit["GraphLowering"] is not real_graph.GraphLowering
    out["compile_fx_got_real"] = compile_fx_module.GraphLowering is real_graph.GraphLowering
    import importlib

    debug = importlib.import_module("torch._inductor.debug")
    from torch._inductor.compile_fx import get_patched_config_dict
    from torch._inductor.select_algorithm import extern_kernels as real

    out["config_equal"] = {
        key: config == get_patched_config_dict(config_patches=wrapper.config) for key, (wrapper, config) in ours.items()
    }
    out["extern_kernels_equal"] = {name: value is getattr(real, name, None) for name, value in served.items()}
    out["debug_flags_equal"] = {name: value == getattr(debug, name) for name, value in flags.items()}
    out["debug_is_real"] = torch._inductor.debug is debug
    # Helpers served in place of a compiler module's re-export of them.
    from precompile._torch.lean_imports import _stand_ins

    out["helpers_equal"] = {
        f"{module}.{name}": value is getattr(importlib.import_module(module), name)
        for module in ("torch._inductor.compile_fx", "torch._inductor.codegen.memory_planning")
        for name, value in _stand_ins().get(module, {}).items()
    }
    # torch's Redis remote cache, whose client import the store deferred,
    # works as torch's: a round trip through a real server, the same classes.
    out["redis_imported_at_install"] = redis_at_install
    if "TORCHINDUCTOR_REDIS_URL" in os.environ:
        from torch._inductor import remote_cache

        backend = remote_cache.RedisRemoteCacheBackend("precompile-contract")
        backend.put("deferred-key", b"deferred value")
        out["redis_round_trip"] = backend.get("deferred-key") == b"deferred value"
        import redis

        out["redis_same_module"] = (
            remote_cache.redis.Redis is redis.Redis
            and remote_cache.redis.exceptions.ConnectionError is redis.exceptions.ConnectionError
            and sys.modules["redis"] is redis
        )
else:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            y = torch.compile(model)(x)
        out["modules"] = sorted(sys.modules)
        out["served"] = dict(counters["precompile"])
        with torch.no_grad():
            out["max_error"] = float((y - model(x)).abs().max())
        if phase == "serve":
            # A served graph runs on after uninstall, the compiler still not imported.
            compiled = torch.compile(model)
            precompile.uninstall()
            with torch.no_grad():
                out["after_uninstall_error"] = float((compiled(x) - y).abs().max())
            out["modules_after_uninstall"] = sorted(sys.modules)
            precompile.install(store, save_on_exit=False)
            # A frame the store does not hold compiles in the same process.
            z = torch.compile(new_frame)(x)
            with torch.no_grad():
                out["new_frame_error"] = float((z - new_frame(x)).abs().max())
            out["after_compile"] = dict(counters["precompile"])
            out["graphs_compiled"] = counters["stats"]["unique_graphs"]
            out["modules_after_compile"] = sorted(sys.modules)
            # Patches to Triton's runtime wait for its import (a CPU start has none).
            from torch._inductor.runtime import triton_heuristics

            def patched_by() -> dict[str, str]:
                # The file each method's code is in (a wrapper keeps torch's name and module).
                methods = vars(triton_heuristics.CachingAutotuner)
                names = (
                    "autotune_to_one_config",
                    "maybe_clone_args",
                    "coordinate_descent_tuning",
                    "_precompile_config",
                    "recheck_autotune_cache",
                )
                return {name: os.path.basename(methods[name].__code__.co_filename) for name in names}

            out["triton_runtime_patched_by"] = patched_by()
            precompile.uninstall()
            out["triton_runtime_after_uninstall"] = patched_by()
    out["warnings"] = [str(w.message) for w in caught]
    if phase == "compile":
        precompile.save()
with open(out_path, "w") as f:
    json.dump(out, f)
