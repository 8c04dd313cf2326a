"""A sampling profiler for one thread: where the wall-clock time of a window goes.

cProfile loses the call stack across Dynamo's frame-evaluation hook (a loaded
graph's callers show up as roots) and slows many-small-call code several
times over, which reorders the ranking. Sampling the main thread's stack
every millisecond from a second thread does neither: each sample is one whole
stack, so a function's share of samples is its share of wall time.

    with Sampler() as s:
        work()
    s.write(Path("out"))   # out.txt: inclusive and self shares; out.folded: flame graph input

Samples land only when the sampler thread gets the GIL, so time inside a C
call that holds the GIL is charged to the frame the call returns to.
"""

from __future__ import annotations

import collections
import sys
import threading
import time
from pathlib import Path
from types import FrameType, TracebackType


def _label(frame: FrameType) -> str:
    code = frame.f_code
    path = code.co_filename
    for marker in ("site-packages/", "/python/", "/benches/", "/pylibs/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{code.co_firstlineno}({code.co_name})"


class Sampler:
    def __init__(self, interval_s: float = 0.001) -> None:
        self.interval_s = interval_s
        self.stacks: collections.Counter[tuple[str, ...]] = collections.Counter()
        self.samples = 0
        self.seconds = 0.0
        self._target = threading.get_ident()
        self._active = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Sampler:
        """Sample until the block ends; entering again adds another window."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
            self._thread.start()
        self._switch = sys.getswitchinterval()
        sys.setswitchinterval(self.interval_s / 2)  # let the sampler in between bytecodes
        self._start = time.perf_counter()
        self._active.set()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self._active.clear()
        self.seconds += time.perf_counter() - self._start
        sys.setswitchinterval(self._switch)

    def _run(self) -> None:
        while self._active.wait():
            time.sleep(self.interval_s)
            frame = sys._current_frames().get(self._target)
            if not self._active.is_set():
                continue
            stack = []
            while frame is not None:
                stack.append(_label(frame))
                frame = frame.f_back
            self.stacks[tuple(reversed(stack))] += 1
            self.samples += 1

    def write(self, path: Path, top: int = 150) -> None:
        """`path`.txt with the inclusive and self tables, `path`.folded for flame graphs."""
        inclusive: collections.Counter[str] = collections.Counter()
        own: collections.Counter[str] = collections.Counter()
        for stack, n in self.stacks.items():
            for name in set(stack):
                inclusive[name] += n
            if stack:
                own[stack[-1]] += n
        per = self.seconds / self.samples if self.samples else 0.0
        with open(f"{path}.txt", "w") as f:
            f.write(f"{self.samples} samples over {self.seconds:.3f} s ({per * 1e3:.2f} ms each)\n\n")
            for title, table in (("inclusive", inclusive), ("self", own)):
                f.write(f"{title}: seconds  share  function\n")
                for name, n in table.most_common(top):
                    f.write(f"{n * per:9.3f} {n / self.samples:6.1%}  {name}\n")
                f.write("\n")
        with open(f"{path}.folded", "w") as f:
            for stack, n in self.stacks.most_common():
                f.write(";".join(stack) + f" {n}\n")
