"""Counting the compiled kernels a process loads, and what loading them costs raw.

GPU: every Triton kernel reaches the driver once, through Triton's
`CompiledKernel._init_handles` or Inductor's static launcher
(`StaticallyLaunchedTritonKernel.load_kernel`); both are wrapped to count and
time each first load and to keep the binary. `raw_gpu_loads` then loads the
same binaries straight through Triton's driver utility (`load_binary`:
cuModuleLoadData plus cuModuleGetFunction), the floor a loader can reach, in a
fresh process whose CUDA context is up, so that its first loads pay what the
measured process's first loads pay (a module's first load in a context costs
more than a repeat); repeats of the same binaries are reported beside it.

CPU: Inductor's C++ kernels are shared libraries under the Inductor cache dir;
`mapped_libraries` lists those the process has mapped, and `raw_cpu_loads`
dlopens copies of them (a copy: the loaded path would return the open handle).
"""

from __future__ import annotations

import ctypes
import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


class GpuKernelLog:
    """First loads of Triton kernels in this process: count, seconds, binaries."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.times: list[float] = []  # each first load, in order
        self.binaries: list[tuple[str, bytes, int, int]] = []  # (name, binary, shared, device)
        self._wrap_triton()
        self._wrap_static_launcher()

    def note(self, seconds: float) -> None:
        self.seconds += seconds
        self.times.append(seconds)

    def summary(self) -> dict[str, Any]:
        """Per-kernel seconds of the loads seen: mean, median and the first."""
        return _stats(self.times)

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
                log.note(time.perf_counter() - start)
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
                    log.note(time.perf_counter() - start)
                    log.binaries.append((kernel.name, binary, int(kernel.shared), device))

        return load_kernel


def _stats(times: list[float]) -> dict[str, Any]:
    if not times:
        return {"per_kernel_s": None, "median_s": None, "first_s": None}
    return {"per_kernel_s": sum(times) / len(times), "median_s": statistics.median(times), "first_s": times[0]}


# Run in a fresh interpreter: bring the CUDA context up, then load each binary
# once (timed one by one), then twice more (the repeats).
_RAW_GPU = """
import json, pickle, sys, time
import torch
binaries = pickle.load(open(sys.argv[1], "rb"))
for device in sorted({b[3] for b in binaries}):
    torch.zeros(1, device=f"cuda:{device}").add_(1)
    torch.cuda.synchronize(device)
from triton.runtime import driver
load_binary = driver.active.utils.load_binary
first = []
for name, binary, shared, device in binaries:
    start = time.perf_counter()
    load_binary(name, binary, shared, device)
    first.append(time.perf_counter() - start)
repeats = []
for _ in range(2):
    start = time.perf_counter()
    for name, binary, shared, device in binaries:
        load_binary(name, binary, shared, device)
    repeats.append((time.perf_counter() - start) / len(binaries))
print(json.dumps({"first": first, "repeats": repeats}))
"""


def raw_gpu_loads(binaries: list[tuple[str, bytes, int, int]]) -> dict[str, Any]:
    """Per-kernel seconds to load `binaries` straight through the driver in a fresh process.

    `per_kernel_s`, `median_s`, `first_s`: that process's first load of each
    binary; `repeat_per_kernel_s`: loading them all again, the better of two passes.
    """
    binaries = [b for b in binaries if b[1]]
    if not binaries:
        return {**_stats([]), "repeat_per_kernel_s": None}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "binaries.pickle")
        with open(path, "wb") as f:
            pickle.dump(binaries, f)
        done = subprocess.run(
            [sys.executable, "-c", _RAW_GPU, path], capture_output=True, text=True, check=True, timeout=600
        )
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    return {**_stats(seen["first"]), "repeat_per_kernel_s": min(seen["repeats"])}


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
