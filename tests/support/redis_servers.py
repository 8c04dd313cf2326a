"""Real redis-server instances on loopback ports, for the remote tests.

Each server runs from `redis-server` on PATH in its own directory with
persistence off. A test that kills or stops a server asks for one of its
own; the rest share one and flush it between tests.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import redis


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(cluster: bool = False) -> int:
    """A free loopback port; for a cluster node, one whose bus port (+10000) is free too."""
    if not cluster:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    rng = random.Random()
    while True:
        port = rng.randrange(20000, 45000)
        if _bindable(port) and _bindable(port + 10000):
            return port


class RedisServer:
    """One redis-server process; `url` reaches it."""

    def __init__(self, directory: Path, *extra: str) -> None:
        self.port = free_port(cluster="--cluster-enabled" in extra)
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        binary = shutil.which("redis-server")
        assert binary is not None
        with open(directory / "redis.log", "wb") as log:
            self.proc = subprocess.Popen(
                [
                    binary,
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    str(directory),
                    "--protected-mode",
                    "no",
                    *extra,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._client: redis.Redis | None = None
        self.wait_ready()

    def client(self) -> redis.Redis:
        """The test's own connection to this server (closed with it)."""
        if self._client is None:
            self._client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)
        return self._client

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 10
        while True:
            try:
                with redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5) as probe:
                    if probe.ping():
                        return
            except redis.ConnectionError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"redis-server on {self.port} did not start:\n{(self.directory / 'redis.log').read_text()[-2000:]}"
                )
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL: the server vanishes mid-conversation."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        """SIGSTOP: connections stay open and nothing answers."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def cont(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


def _cluster_state(node: RedisServer) -> str:
    info = node.client().execute_command("CLUSTER INFO")
    state = info.get("cluster_state") if isinstance(info, dict) else None
    return state.decode() if isinstance(state, bytes) else str(state)


class RedisCluster:
    """Three cluster-mode redis-servers joined into one cluster, no replicas."""

    def __init__(self, directory: Path) -> None:
        self.nodes: list[RedisServer] = []
        try:
            self._start(directory)
        except BaseException:
            self.close()
            raise

    def _start(self, directory: Path) -> None:
        for i in range(3):
            self.nodes.append(
                RedisServer(
                    directory / f"node{i}",
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                )
            )
        cli = shutil.which("redis-cli")
        assert cli is not None
        subprocess.run(
            [
                cli,
                "--cluster",
                "create",
                *(f"127.0.0.1:{n.port}" for n in self.nodes),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        deadline = time.monotonic() + 20
        while any(_cluster_state(n) != "ok" for n in self.nodes):
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not come up")
            time.sleep(0.1)
        self.url = f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    def close(self) -> None:
        for n in self.nodes:
            n.close()


def kill_on_command(server: RedisServer, needle: bytes) -> threading.Thread:
    """SIGKILL `server` as soon as it receives a command containing `needle`.

    Watches the server's MONITOR stream, so the kill lands while the client
    is in the middle of its conversation, right after that command arrived.
    """
    # Long enough for a host that compiles for minutes on a loaded machine
    # before its first command of interest.
    watcher = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=600)
    monitor = watcher.monitor()
    monitor.__enter__()

    def watch() -> None:
        try:
            while True:
                cmd = monitor.next_command()
                if needle.decode() in cmd["command"]:
                    server.kill()
                    return
        except (redis.RedisError, OSError, ValueError):  # the server went away
            return
        finally:
            monitor.connection.disconnect()
            watcher.close()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread
