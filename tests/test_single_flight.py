"""Single flight: processes sharing a store compile a function once; a dead or stuck compiler never strands the others.

Real processes (`programs/ranks.py single`, with `PRECOMPILE_SINGLE_FLIGHT=1`,
as serving processes started together would run), real `kill -9` and
`SIGSTOP`, and the kernel's own record of who holds which `flock`
(`/proc/locks`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support.counters import counter
from support.processes import PROGRAMS, child_env, last_line

from precompile.compile_lock import CompileLock, lock_path

RANKS = PROGRAMS / "ranks.py"
KEY = "ab" * 32


def _start(store: Path, inductor: Path, mode: str = "single", **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(RANKS), str(store), mode],
        env=child_env(
            {"PRECOMPILE_SINGLE_FLIGHT": "1", "TORCHINDUCTOR_CACHE_DIR": str(inductor), "OMP_NUM_THREADS": "1", **env}
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


class _Lines:
    """A child's stderr, read as it comes, so a test can wait for a line."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.lines.append(line)

    def wait_for(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            assert time.monotonic() < deadline, "".join(self.lines)[-3000:]
            time.sleep(0.1)

    def text(self) -> str:
        self._thread.join(timeout=30)
        return "".join(self.lines)


def _holder(store: Path, timeout: float = 300) -> int:
    """The pid holding a compile lock of `store`, from the kernel's lock table."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        inodes = (
            {os.stat(p).st_ino: p for p in (store / "locks").glob("compile-*")} if (store / "locks").is_dir() else {}
        )
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            # "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"
            if len(fields) >= 6 and fields[1] == "FLOCK" and int(fields[5].rsplit(":", 1)[1]) in inodes:
                return int(fields[4])
        time.sleep(0.05)
    raise AssertionError("no process took a compile lock")


def _two(
    store: Path, tmp_path: Path, **env: str
) -> tuple[dict[int, subprocess.Popen[str]], subprocess.Popen[str], subprocess.Popen[str]]:
    """Two processes started together on one store: (all, the one holding the compile lock, the other)."""
    procs = {p.pid: p for p in (_start(store, tmp_path / f"ind-{n}", **env) for n in "ab")}
    try:
        holder = procs[_holder(store)]
    except BaseException:
        _end(procs)
        raise
    (waiter,) = [p for p in procs.values() if p is not holder]
    return procs, holder, waiter


def _result(proc: subprocess.Popen[str], lines: _Lines) -> dict:
    assert proc.stdout is not None and proc.stderr is not None
    with proc.stdout:
        out = proc.stdout.read()
    code = proc.wait(timeout=400)
    err = lines.text()
    proc.stderr.close()
    assert code == 0, err[-4000:]
    return json.loads(last_line(out))


def _end(procs: dict[int, subprocess.Popen[str]]) -> None:
    """Kill what still runs and close every pipe."""
    for p in procs.values():
        if p.poll() is None:
            p.kill()
        p.wait(timeout=60)
        for pipe in (p.stdout, p.stderr):
            if pipe is not None and not pipe.closed:
                try:
                    pipe.close()
                except OSError:
                    pass


@pytest.mark.torch
@pytest.mark.slow
def test_processes_started_together_compile_a_graph_break_model_once(tmp_path: Path) -> None:
    """The frames after each graph break compile during the first call: the
    compiling process saves when that call returns, so the entry the other
    process loads holds all of them."""
    store = tmp_path / "store"
    procs = {p.pid: p for p in (_start(store, tmp_path / f"ind-{n}", "breaks") for n in "ab")}
    try:
        results = [_result(p, _Lines(p)) for p in procs.values()]
    finally:
        _end(procs)
    graphs = sorted(counter(r, "stats", "unique_graphs") for r in results)
    assert graphs == [0, 3], json.dumps([r["counters"] for r in results])
    (served,) = [r for r in results if counter(r, "stats", "unique_graphs") == 0]
    assert counter(served, "precompile", "compile_waits_served") == 1, served["counters"]
    assert counter(served, "precompile", "frames_loaded") == 3, served["counters"]
    assert results[0]["result"] == results[1]["result"]


@pytest.mark.torch
@pytest.mark.slow
def test_a_waiter_compiles_when_the_compiling_process_is_killed(tmp_path: Path) -> None:
    store = tmp_path / "store"
    procs, holder, waiter = _two(store, tmp_path)
    try:
        lines = _Lines(waiter)
        lines.wait_for("waiting for another process's compile", timeout=300)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
        result = _result(waiter, lines)
    finally:
        _end(procs)
    # The kernel released the dead holder's lock: the waiter found no entry and compiled.
    assert counter(result, "precompile", "compile_waits") == 1, result["counters"]
    assert counter(result, "precompile", "compile_wait_timeouts") == 0, result["counters"]
    assert counter(result, "stats", "unique_graphs") == 1, result["counters"]
    assert counter(result, "precompile", "single_flight_saves") == 1, result["counters"]
    # ... and saved it: the next process loads it.
    after = _start(store, tmp_path / "ind-c")
    served = _result(after, _Lines(after))
    assert counter(served, "stats", "unique_graphs") == 0, served["counters"]
    assert served["result"] == result["result"]


@pytest.mark.torch
@pytest.mark.slow
def test_a_stuck_compiler_times_out_into_a_compile_with_its_reason(tmp_path: Path) -> None:
    store = tmp_path / "store"
    procs, holder, waiter = _two(store, tmp_path, PRECOMPILE_SINGLE_FLIGHT_TIMEOUT="3")
    try:
        holder.send_signal(signal.SIGSTOP)
        lines = _Lines(waiter)
        result = _result(waiter, lines)
    finally:
        _end(procs)
    assert counter(result, "precompile", "compile_wait_timeouts") == 1, result["counters"]
    assert counter(result, "precompile", "miss_wait_timeout") == 1, result["counters"]
    assert counter(result, "stats", "unique_graphs") == 1, result["counters"]
    assert "compile lock" in lines.text()


@pytest.mark.torch
def test_a_bad_setting_is_refused_at_install(tmp_path: Path) -> None:
    for env in ({"PRECOMPILE_SINGLE_FLIGHT": "sometimes"}, {"PRECOMPILE_SINGLE_FLIGHT_TIMEOUT": "-1"}):
        proc = subprocess.run(
            [sys.executable, "-c", "import sys, precompile; precompile.install(sys.argv[1])", str(tmp_path / "s")],
            env=child_env(env),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 1
        assert f"ValueError: {next(iter(env))} must be" in proc.stderr, proc.stderr[-2000:]


def test_the_lock_excludes_another_holder_until_released(tmp_path: Path) -> None:
    (tmp_path / "locks").mkdir()
    mine = CompileLock(tmp_path, KEY)
    assert mine.try_acquire()
    # Another process cannot take it (flock is per open file, so a second
    # open in this process stands for one).
    other = CompileLock(tmp_path, KEY)
    started = time.monotonic()
    assert not other.acquire(timeout=0.3)
    assert time.monotonic() - started >= 0.3
    mine.release()
    assert other.try_acquire()
    other.release()


def test_a_link_planted_for_a_lock_is_refused_not_followed(tmp_path: Path) -> None:
    (tmp_path / "locks").mkdir()
    victim = tmp_path / "elsewhere"
    os.symlink(victim, lock_path(tmp_path, KEY))
    with pytest.raises(OSError):
        CompileLock(tmp_path, KEY).try_acquire()
    assert not victim.exists()


def test_only_an_entry_key_names_a_lock(tmp_path: Path) -> None:
    for bad in ("", "../x", "AB" * 32, "ab/cd"):
        with pytest.raises(ValueError):
            lock_path(tmp_path, bad)
