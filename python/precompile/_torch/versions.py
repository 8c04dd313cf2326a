"""The torch and Triton versions this process runs, and the torch releases
precompile knows.

`install()` adapts about two dozen torch internals, each by feature detection
(a patch steps aside where torch lacks what it patches): that, not the
version number, decides what runs. The version only decides what to say: a
torch older than `OLDEST_SUPPORTED` lacks what the store needs and is refused
with `UnsupportedTorchError`; one newer than `NEWEST_TESTED` is used, with
one `PrecompileWarning`, since nothing has checked its internals yet.

Triton's version comes from its package metadata: importing Triton costs a
served start tenths of a second, for a string. The CPU's ISA level and the
accelerator's capability name the environment an entry was built for.
"""

from __future__ import annotations

import importlib.metadata
import re
import threading
import warnings

import torch

from ..warning import PrecompileWarning, UnsupportedTorchError

TORCH_VERSION: str = torch.__version__
# The commit torch was built from: two builds of one version string (a
# nightly, a local build) differ here.
TORCH_GIT: str | None = getattr(torch.version, "git_version", None) or None

# The distributions that install the `triton` module, by platform build.
_TRITON_DISTRIBUTIONS = ("triton", "pytorch-triton", "pytorch-triton-rocm", "pytorch-triton-xpu", "triton-xpu")

# Raise NEWEST_TESTED when the test suite passes on a newer torch release.
OLDEST_SUPPORTED = (2, 11)
NEWEST_TESTED = (2, 15)

_warned = threading.Lock()
_warned_for: set[str] = set()


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


def release(version: str) -> tuple[int, int]:
    """(major, minor) of a torch version string: `2.15.0+cu132`, `2.16.0.dev20260101`, `2.16.0a0+git1234`."""
    m = re.match(r"\s*(\d+)\.(\d+)", version)
    if m is None:
        raise ValueError(f"unrecognised torch version {version!r}")
    return int(m.group(1)), int(m.group(2))


def _name(r: tuple[int, int]) -> str:
    return f"{r[0]}.{r[1]}"


def check_torch_version(version: str = TORCH_VERSION) -> None:
    """Refuse a torch older than the oldest supported; warn once about one newer than the newest tested."""
    r = release(version)
    if r < OLDEST_SUPPORTED:
        raise UnsupportedTorchError(
            f"precompile needs torch >= {_name(OLDEST_SUPPORTED)}; this is torch {version} "
            f"(pip install 'torch>={_name(OLDEST_SUPPORTED)}')"
        )
    if r > NEWEST_TESTED:
        with _warned:
            first = version not in _warned_for
            _warned_for.add(version)
        if first:
            warnings.warn(
                PrecompileWarning(
                    f"torch {version} is newer than the newest torch precompile was tested with "
                    f"({_name(NEWEST_TESTED)}); it adapts to torch's internals by feature detection, "
                    "so it should work or step aside, but check `precompile doctor` and report problems"
                ),
                stacklevel=3,
            )


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


def startable_accelerators() -> list[str]:
    """The accelerator device types present here that this process has not
    initialized yet: asking for their capability starts them."""
    found = []
    initialized = initialized_accelerators()
    for name in ("cuda", "xpu"):
        module = getattr(torch, name, None)
        is_available = getattr(module, "is_available", None)
        try:
            if name not in initialized and is_available is not None and is_available():
                found.append(name)
        except Exception:  # a broken driver: no accelerator entries here
            continue
    return found


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
