"""What torch's own APIs promise, held with the store installed.

Each test follows the shape of torch's own precompile tests: compile with
`caching_precompile`, save through torch's API, reset Dynamo and
PrecompileContext (a new process, as far as Dynamo can tell), then compile
again under `fail_on_recompile`. The store must be invisible: torch's
return values, frame counters, counters and the backends a reload installs.

Here `store` is the path of a store installed for the test (the suite's
`store` fixture, an open `Store`, is overridden for this directory).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from support.torch_contract import reset
from torch._dynamo.precompile_context import PrecompileContext
from torch._dynamo.utils import counters

import precompile


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    torch._dynamo.reset()
    PrecompileContext.clear()
    counters.clear()
    path = tmp_path / "store"
    with precompile.installed(path, save_on_exit=False):
        yield path
    reset()
