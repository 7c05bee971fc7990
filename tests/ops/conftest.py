"""Fixtures of the operations tests: a Redis of their own (with AOF when asked), real workers.

Workers are started by the cluster tests' ``WorkerFactory`` (``chalk worker``
processes with the ``cluster_judges`` test judges loaded); Redis is a
``redis-server`` on a free port, which a test may stop and start again on the
same port. Without redis-server the tests are skipped, except under ``CI=true``.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cluster.conftest import WorkerFactory, scorings
from processes import free_port, need, start_redis, stop


@dataclass
class RedisServer:
    """A redis-server on a fixed port that a test can stop and start again."""

    port: int
    workdir: Path
    aof: bool
    fsync: str = "everysec"
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = start_redis(self.port, self.workdir, aof=self.aof, fsync=self.fsync)

    def stop(self, sig: int | None = None) -> None:
        if self.proc is not None:
            if sig is None:
                stop(self.proc)
            else:
                stop(self.proc, sig)
            self.proc = None


@pytest.fixture
def redis_factory(tmp_path: Path) -> Iterator[list[RedisServer]]:
    """Servers a test makes with ``make_redis``; all stopped at the end."""
    servers: list[RedisServer] = []
    yield servers
    for server in servers:
        server.stop()


@pytest.fixture
def make_redis(redis_factory: list[RedisServer], tmp_path: Path):  # type: ignore[no-untyped-def]
    """``make_redis(aof=False, start=True, fsync="everysec")``: a redis-server of the test's."""
    if shutil.which("redis-server") is None:
        need("redis-server")

    def make(aof: bool = False, start: bool = True, fsync: str = "everysec") -> RedisServer:
        workdir = tmp_path / f"redis-{len(redis_factory)}"
        workdir.mkdir()
        server = RedisServer(free_port(), workdir, aof, fsync)
        redis_factory.append(server)
        if start:
            server.start()
        return server

    return make


@pytest.fixture
def ops_redis(make_redis) -> RedisServer:  # type: ignore[no-untyped-def]
    """A plain redis-server for this test."""
    return make_redis()


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[WorkerFactory]:
    """Start ``chalk worker`` processes for this test (stopped afterwards)."""
    factory = WorkerFactory(tmp_path)
    yield factory
    factory.stop_all()


__all__ = ["scorings"]  # the cluster tests' fixture, used here too
