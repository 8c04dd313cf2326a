"""torch's classes and values the rest of the package names, imported once here."""

from __future__ import annotations

from torch._dynamo.exc import PackageError
from torch._dynamo.package import CompilePackage, DynamoStore, PrecompileCacheEntry, _DynamoCacheEntry
from torch._dynamo.precompile_context import BackendCacheArtifact, PrecompileContext
from torch._dynamo.utils import counters
from torch._functorch._aot_autograd.aot_autograd_result import (
    BundledAOTAutogradCacheArtifact,
    BundledAOTAutogradResult,
    SerializedGraphModule,
)
from torch._inductor.triton_bundler import TritonBundle, TritonKernelArtifact, TritonKernelArtifacts

# The entry Dynamo records per compiled function (bytecode, guards); private in
# torch, named here so the rest of the package does not.
DynamoCacheEntry = _DynamoCacheEntry

__all__ = [
    "_DynamoCacheEntry",
    "BackendCacheArtifact",
    "BundledAOTAutogradCacheArtifact",
    "BundledAOTAutogradResult",
    "CompilePackage",
    "DynamoCacheEntry",
    "DynamoStore",
    "PackageError",
    "PrecompileCacheEntry",
    "PrecompileContext",
    "SerializedGraphModule",
    "TritonBundle",
    "TritonKernelArtifact",
    "TritonKernelArtifacts",
    "counters",
]
