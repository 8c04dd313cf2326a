"""Shared fixtures: an empty store, a store a real compile filled, and real redis-server instances.

Helpers that are not fixtures live in `support/`.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from precompile import Store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    """An empty store of this test's own."""
    # Imported where used: test_guards.py runs where precompile's extension is not built.
    from precompile import Store

    return Store(tmp_path / "store")


@pytest.fixture
def world_dir() -> Iterator[Path]:
    """A directory other uids can reach (pytest's tmp_path is root-only)."""
    base = Path(tempfile.mkdtemp(prefix="precompile-world-"))
    base.chmod(0o755)
    yield base
    # A test may leave a mount or another user's files behind in it.
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def compiled_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A store filled by the scenario program's "inference" compile in a child
    process, and that side's result; one per test module."""
    from support.warm_start import run_scenario

    work = tmp_path_factory.mktemp("compiled")
    a = run_scenario("inference", "compile", work / "store", work)
    return work / "store", a


_NO_REDIS = "redis-server is not on PATH (apt-get install redis-server); the remote tests need a real server"


@pytest.fixture(scope="session")
def redis_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[[], object]]:
    """Starts private redis-servers on demand; all are stopped at the end of the session."""
    if shutil.which("redis-server") is None:
        pytest.skip(_NO_REDIS)
    from support.redis_servers import RedisServer

    started: list[RedisServer] = []

    def start() -> RedisServer:
        server = RedisServer(tmp_path_factory.mktemp("redis"))
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


@pytest.fixture(scope="session")
def _shared_redis(redis_factory: Callable[[], object]) -> object:
    return redis_factory()


@pytest.fixture
def redis_server(_shared_redis: object) -> object:
    """The session's shared server, emptied for this test."""
    _shared_redis.client().flushall()  # type: ignore[attr-defined]
    return _shared_redis


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A 3-node Redis Cluster on loopback ports."""
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        pytest.skip(_NO_REDIS)
    from support.redis_servers import RedisCluster

    cluster = RedisCluster(Path(tmp_path_factory.mktemp("cluster")))
    yield cluster
    cluster.close()


@pytest.fixture(scope="session")
def fleet_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A signing key for the tests' fleet: (secret key file, public key)."""
    from precompile import keygen

    path = str(tmp_path_factory.mktemp("fleet-key") / "fleet.key")
    return path, keygen(path)


@pytest.fixture
def signed_fleet(fleet_key: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """Hosts of this test (and the processes it starts) sign with the fleet key and trust it."""
    monkeypatch.setenv("PRECOMPILE_SIGNING_KEY", fleet_key[0])
    monkeypatch.setenv("PRECOMPILE_TRUSTED_KEYS", fleet_key[1])
    monkeypatch.delenv("PRECOMPILE_ALLOW_UNSIGNED", raising=False)
    return fleet_key
