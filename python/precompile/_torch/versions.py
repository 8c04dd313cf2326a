"""The torch and Triton versions this process runs."""

from __future__ import annotations

import torch

TORCH_VERSION: str = torch.__version__


def _triton_version() -> str | None:
    try:
        import triton
    except Exception:  # absent, or present but broken on this machine
        return None
    return getattr(triton, "__version__", None)


TRITON_VERSION: str | None = _triton_version()
