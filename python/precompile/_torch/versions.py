"""What this process runs: torch and Triton versions, the CPU's ISA level and the accelerator.

Triton's version comes from its package metadata: importing Triton costs a
served start tenths of a second, for a string.
"""

from __future__ import annotations

import importlib.metadata

import torch

TORCH_VERSION: str = torch.__version__
# The commit torch was built from: two builds of one version string (a
# nightly, a local build) differ here.
TORCH_GIT: str | None = getattr(torch.version, "git_version", None) or None

# The distributions that install the `triton` module, by platform build.
_TRITON_DISTRIBUTIONS = ("triton", "pytorch-triton", "pytorch-triton-rocm", "pytorch-triton-xpu", "triton-xpu")


def _triton_version() -> str | None:
    for name in _TRITON_DISTRIBUTIONS:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        except Exception:  # broken metadata: as if absent
            return None
    return None


TRITON_VERSION: str | None = _triton_version()


def cpu_capability() -> str:
    """The vector ISA level Inductor compiles CPU kernels for (`AVX512`, `AVX2`, `DEFAULT`, ...)."""
    return str(torch.backends.cpu.get_cpu_capability())


def accelerator_capability(device_type: str) -> str | None:
    """What the code of an entry for `device_type` was compiled for: None for
    `cpu`; for CUDA the compute capability (`cuda 9.0`), for ROCm the GPU
    architecture; for another accelerator its device type.

    Called for an accelerator only once the process has initialized it
    (see `initialized_accelerators`), so it never starts a device context.
    """
    if device_type == "cpu":
        return None
    if device_type == "cuda":
        if getattr(torch.version, "hip", None):
            arch = torch.cuda.get_device_properties(torch.cuda.current_device()).gcnArchName
            return f"rocm {arch.split(':')[0]}"
        major, minor = torch.cuda.get_device_capability()
        return f"cuda {major}.{minor}"
    return device_type


def initialized_accelerators() -> list[str]:
    """The accelerator device types this process has already initialized."""
    found = []
    for name in ("cuda", "xpu"):
        module = getattr(torch, name, None)
        is_initialized = getattr(module, "is_initialized", None)
        try:
            if is_initialized is not None and is_initialized():
                found.append(name)
        except Exception:  # a broken driver: no accelerator entries here
            continue
    return found
