"""A private redis-server per test session and real ``chalk worker`` processes.

Nothing here is faked: workers are separate processes started with ``chalk
worker``, talking to a redis-server on a free port. Each test starts from an
empty store (every ``chalk:`` key and the queue are deleted, kombu's own keys
kept). Without redis-server the tests are skipped, except under ``CI=true``,
where they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from both_clients import LoopThread, SyncView
from processes import free_port, need, start_redis, stop

from chalk_client import AsyncChalkClient, ChalkClient, ChalkSettings

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The session's private redis-server; yields its URL."""
    if shutil.which("redis-server") is None:
        need("redis-server")
    port = free_port()
    proc = start_redis(port, tmp_path_factory.mktemp("redis"))
    yield f"redis://127.0.0.1:{port}/0"
    stop(proc)


def clear(url: str, queue: str = "chalk") -> None:
    """Delete every Chalk key and the queue's messages (kombu's bindings stay)."""
    client = redis.Redis.from_url(url)
    keys = list(client.scan_iter("chalk:*", count=1000))
    for start in range(0, len(keys), 1000):
        client.delete(*keys[start : start + 1000])
    client.delete(queue)
    client.close()


@pytest.fixture
def redis_url(redis_server: str) -> Iterator[str]:
    """The session's Redis, emptied of Chalk's keys before the test."""
    clear(redis_server)
    yield redis_server


_databases = iter(range(1, 64))  # redis-server runs with --databases 64


@pytest.fixture
def own_redis_url(redis_server: str) -> str:
    """A Redis database of this test's own (the shared worker uses database 0), empty."""
    number = next(_databases, None)
    if number is None:
        pytest.fail("more than 63 tests asked for a database of their own; raise the limit")
    url = redis_server.rsplit("/", 1)[0] + f"/{number}"
    redis.Redis.from_url(url).flushdb()
    return url


@dataclass
class Worker:
    """A ``chalk worker`` process and its log."""

    proc: subprocess.Popen[bytes]
    log: Path
    name: str

    @property
    def pid(self) -> int:
        return self.proc.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, needle: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text():
            if self.proc.poll() is not None:
                raise AssertionError(f"worker {self.name} exited:\n{self.text()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{needle!r} not in worker log:\n{self.text()[-3000:]}")
            time.sleep(0.05)


@dataclass
class WorkerFactory:
    """Starts workers; stops every one of them at the end of the test."""

    logs: Path
    started: list[Worker] = field(default_factory=list)

    def __call__(
        self,
        redis_url: str,
        *,
        concurrency: int | None = 16,
        env: dict[str, str] | None = None,
        wait: bool = True,
        args: tuple[str, ...] = (),
    ) -> Worker:
        name = f"w{len(self.started) + 1}-{uuid.uuid4().hex[:6]}"
        log = self.logs / f"{name}.log"
        full_env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("CHALK_")},
            "CHALK_REDIS_URL": redis_url,
            "CHALK_LEASE_S": "2",
            "CHALK_TASK_MODULES": "cluster_judges",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
            **(env or {}),
        }
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "chalk_client.cli",
                    "worker",
                    "-n",
                    f"{name}@%h",
                    *(["--concurrency", str(concurrency)] if concurrency else []),
                    "-l",
                    "info",
                    *args,
                ],
                cwd=ROOT,
                env=full_env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        worker = Worker(proc, log, name)
        self.started.append(worker)
        if wait:
            worker.wait_for(" ready.")
        return worker

    def stop_all(self) -> None:
        for worker in self.started:
            stop(worker.proc)


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[WorkerFactory]:
    """Start ``chalk worker`` processes for this test (stopped afterwards)."""
    factory = WorkerFactory(tmp_path)
    yield factory
    factory.stop_all()


@pytest.fixture(scope="session")
def shared_worker(redis_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    """One worker for the whole session, for tests that need any worker at all."""
    factory = WorkerFactory(tmp_path_factory.mktemp("shared-worker"))
    worker = factory(redis_server, concurrency=32)
    yield worker
    factory.stop_all()


ClientKind = str
"""``sync`` (``ChalkClient``) or ``async`` (``AsyncChalkClient`` driven through ``SyncView``)."""


@pytest.fixture(params=["sync", "async"])
def make_client(request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """``make_client(url, **kwargs)``: a client of each kind in turn, closed afterwards.

    The asyncio client is seen through ``SyncView``: each test drives both clients
    with the same code.
    """
    made: list[Any] = []
    loop = LoopThread() if request.param == "async" else None

    def make(url: str, **kwargs: Any) -> Any:
        if loop is None:
            client: Any = ChalkClient(url, **kwargs)
        else:
            client = SyncView(AsyncChalkClient(url, **kwargs), loop)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()
    if loop is not None:
        loop.stop()


@pytest.fixture
def client(redis_url: str, shared_worker: Worker, make_client: Callable[..., Any]) -> Any:
    """A client of the session's cluster, with a worker running: each kind in turn."""
    return make_client(redis_url, settings=ChalkSettings())


@pytest.fixture
def scorings(tmp_path: Path) -> Callable[[], list[tuple[str, str, int]]]:
    """The log the ``test_log`` judge writes: ``(event, job key, pid)`` per line."""
    path = tmp_path / "scorings.log"
    path.touch()

    def read() -> list[tuple[str, str, int]]:
        rows = []
        for line in path.read_text().splitlines():
            event, key, pid = line.split()
            rows.append((event, key, int(pid)))
        return rows

    read.path = str(path)  # type: ignore[attr-defined]
    return read
