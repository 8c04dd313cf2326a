"""The torch and Triton versions this process runs, and the torch releases
precompile knows.

`install()` adapts about two dozen torch internals, each by feature detection
(a patch steps aside where torch lacks what it patches): that, not the
version number, decides what runs. The version only decides what to say: a
torch older than `OLDEST_SUPPORTED` lacks what the store needs and is refused
with `UnsupportedTorchError`; one newer than `NEWEST_TESTED` is used, with
one `PrecompileWarning`, since nothing has checked its internals yet.
"""

from __future__ import annotations

import re
import threading
import warnings

import torch

from ..warning import PrecompileWarning, UnsupportedTorchError

TORCH_VERSION: str = torch.__version__

# Raise NEWEST_TESTED when the test suite passes on a newer torch release.
OLDEST_SUPPORTED = (2, 11)
NEWEST_TESTED = (2, 15)

_warned = threading.Lock()
_warned_for: set[str] = set()


def _triton_version() -> str | None:
    try:
        import triton
    except Exception:  # absent, or present but broken on this machine
        return None
    return getattr(triton, "__version__", None)


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
