"""Counting the compiled kernels a process loads, and what loading them costs raw.

GPU: every Triton kernel reaches the driver once, through Triton's
`CompiledKernel._init_handles` or Inductor's static launcher
(`StaticallyLaunchedTritonKernel.load_kernel`); both are wrapped to count and
time each first load and to keep the binary. `raw_gpu_loads` then loads the
same binaries again straight through Triton's driver utility (`load_binary`:
cuModuleLoadData plus cuModuleGetFunction), the floor a loader can reach.

CPU: Inductor's C++ kernels are shared libraries under the Inductor cache dir;
`mapped_libraries` lists those the process has mapped, and `raw_cpu_loads`
dlopens copies of them (a copy: the loaded path would return the open handle).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any


class GpuKernelLog:
    """First loads of Triton kernels in this process: count, seconds, binaries."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.binaries: list[tuple[str, bytes, int, int]] = []  # (name, binary, shared, device)
        self._wrap_triton()
        self._wrap_static_launcher()

    def _wrap_triton(self) -> None:
        try:
            from triton.compiler.compiler import CompiledKernel
        except ImportError:
            return
        original = CompiledKernel._init_handles
        log = self

        def init_handles(kernel: Any) -> Any:
            if getattr(kernel, "module", None) is not None:
                return original(kernel)
            start = time.perf_counter()
            try:
                return original(kernel)
            finally:
                log.seconds += time.perf_counter() - start
                import torch

                log.binaries.append((kernel.name, kernel.kernel, kernel.metadata.shared, torch.cuda.current_device()))

        CompiledKernel._init_handles = init_handles

    def _wrap_static_launcher(self) -> None:
        try:
            from torch._inductor.runtime import static_triton_launcher as launcher
        except ImportError:
            try:
                from torch._inductor.runtime import static_cuda_launcher as launcher  # type: ignore[no-redef]
            except ImportError:
                return
        # The base class and, in some releases, its CUDA subclass each define load_kernel.
        for cls in vars(launcher).values():
            if isinstance(cls, type) and "load_kernel" in vars(cls):
                cls.load_kernel = self._wrapped_load_kernel(cls.load_kernel)

    def _wrapped_load_kernel(self, original: Any) -> Any:
        log = self

        def load_kernel(kernel: Any, device: int) -> Any:
            if kernel.function is not None:
                return original(kernel, device)
            path = getattr(kernel, "cubin_path", None)
            binary = Path(path).read_bytes() if path else (getattr(kernel, "cubin_raw", None) or b"")
            start = time.perf_counter()
            try:
                return original(kernel, device)
            finally:
                if kernel.function is not None and not getattr(kernel, "_counted_load", False):
                    kernel._counted_load = True  # a subclass calling its base's load counts once
                    log.seconds += time.perf_counter() - start
                    log.binaries.append((kernel.name, binary, int(kernel.shared), device))

        return load_kernel


def raw_gpu_loads(binaries: list[tuple[str, bytes, int, int]]) -> float | None:
    """Seconds per kernel to load `binaries` again straight through the driver, median of 3 passes."""
    binaries = [b for b in binaries if b[1]]
    if not binaries:
        return None
    from triton.runtime import driver

    load_binary = driver.active.utils.load_binary
    passes = []
    for _ in range(3):
        start = time.perf_counter()
        for name, binary, shared, device in binaries:
            load_binary(name, binary, shared, device)
        passes.append((time.perf_counter() - start) / len(binaries))
    return sorted(passes)[1]


def mapped_libraries(under: str) -> set[str]:
    """Shared libraries under `under` this process has mapped."""
    under = os.path.realpath(under)
    found = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].strip().endswith(".so"):
                path = os.path.realpath(parts[5].strip())
                if path.startswith(under + os.sep):
                    found.add(path)
    return found


def raw_cpu_loads(libraries: set[str]) -> float | None:
    """Seconds per library to dlopen a fresh copy of each of `libraries` (the copy not timed)."""
    if not libraries:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        copies = []
        for i, path in enumerate(sorted(libraries)):
            copy = os.path.join(tmp, f"k{i}.so")
            shutil.copyfile(path, copy)
            copies.append(copy)
        start = time.perf_counter()
        for copy in copies:
            ctypes.CDLL(copy)
        return (time.perf_counter() - start) / len(copies)
