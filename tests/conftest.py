"""Every shared fixture of the tests, in one place.

- jobs scored in this process through the public ``score_job`` path (``score``,
  ``script``), and both ways a ``{python}`` script starts (``python_start``);
- Redis: the session's private redis-server (``redis_server``, ``redis_url``
  emptied for each test, ``own_redis_url`` a database of the test's own) and
  servers a test stops and starts itself (``make_redis``);
- real ``chalk worker`` processes (``start_worker``, ``shared_worker``) and
  clients of both kinds (``make_client``, ``client``);
- the cgroup around hostile ``chalk score`` runs (``test_cap``);
- a receiver of batch callbacks on loopback (``callback_receiver``).

Without redis-server the tests that need it are skipped, except under
``CI=true``, where they fail. The processes themselves are in ``processes.py``.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from both_clients import LoopThread, SyncView
from callback_receiver import CallbackReceiver
from processes import (
    RedisServer,
    Worker,
    WorkerFactory,
    clear,
    free_port,
    need,
    start_redis,
    stop,
)

from chalk_client import AsyncChalkClient, ChalkClient, ChalkSettings, JobResult, ScoringJob
from chalk_worker import score_job
from chalk_worker.sandbox.cgroup_support import own_cgroup


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slow",
        action="store_true",
        help="run the tests marked slow too (skipped locally by default; CI=true runs them all)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Local runs stay quick; CI (CI=true, as .ci/run sets) runs every test.
    if config.getoption("--slow") or os.environ.get("CI") == "true":
        return
    skip = pytest.mark.skip(reason="slow: run with --slow (CI=true runs every test)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def score() -> Callable[..., JobResult]:
    """Score a job built from keyword arguments, as a worker would."""

    def run(**job: Any) -> JobResult:
        return score_job(ScoringJob(**job))

    return run


@pytest.fixture
def script(tmp_path: Path) -> Callable[[str], str]:
    """Write a Python scoring script to a file and return its path.

    Named in a command, the file is shown read-only to the sandboxed script.
    """
    count = 0

    def write(body: str) -> str:
        nonlocal count
        count += 1
        path = tmp_path / f"script_{count}.py"
        path.write_text(textwrap.dedent(body))
        path.chmod(0o755)
        return str(path)

    return write


@pytest.fixture(params=["warm", "cold"])
def python_start(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test with warm Python on, then off (``CHALK_WARM_PYTHON``)."""
    mode = str(request.param)
    monkeypatch.setenv("CHALK_WARM_PYTHON", "true" if mode == "warm" else "false")
    return mode


@pytest.fixture(scope="module")
def test_cap() -> Iterator[list[Path]]:
    """Cgroups (memory 3 GiB, 2,048 processes) around every worker these tests start."""
    folders = []
    name = f"chalk-tests-{os.getpid()}"
    for controller, limit_file, limit in (
        ("memory", "memory.limit_in_bytes", str(3 << 30)),
        ("pids", "pids.max", "2048"),
    ):
        base = Path("/sys/fs/cgroup") / controller / own_cgroup(controller).lstrip("/")
        folder = base / name
        with contextlib.suppress(OSError):
            folder.mkdir(exist_ok=True)
            (folder / limit_file).write_text(limit)
            folders.append(folder)
    yield folders
    for folder in folders:
        for child in sorted(folder.rglob("*"), key=lambda p: -len(p.parts)):
            if child.is_dir():
                with contextlib.suppress(OSError):
                    child.rmdir()
        with contextlib.suppress(OSError):
            folder.rmdir()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The session's private redis-server; yields its URL."""
    if shutil.which("redis-server") is None:
        need("redis-server")
    port = free_port()
    proc = start_redis(port, tmp_path_factory.mktemp("redis"))
    yield f"redis://127.0.0.1:{port}/0"
    stop(proc)


@pytest.fixture
def redis_url(redis_server: str) -> Iterator[str]:
    """The session's Redis, emptied of Chalk's keys before the test."""
    clear(redis_server)
    yield redis_server


_databases = collections.deque(range(1, 64))  # redis-server runs with --databases 64
"""The databases free for ``own_redis_url``: one given back goes last, to be taken again as
late as can be (whatever a finished test left running has the longest to stop)."""


@pytest.fixture
def own_redis_url(redis_server: str) -> Iterator[str]:
    """A Redis database of this test's own (the shared worker uses database 0), empty."""
    if not _databases:
        pytest.fail("more than 63 tests at once asked for a database of their own")
    number = _databases.popleft()
    url = redis_server.rsplit("/", 1)[0] + f"/{number}"
    with redis.Redis.from_url(url) as store:
        store.flushdb()
    try:
        yield url
    finally:
        with contextlib.suppress(redis.RedisError), redis.Redis.from_url(url) as store:
            store.flushdb()
        _databases.append(number)


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
def callback_receiver() -> Iterator[CallbackReceiver]:
    """An HTTP receiver of batch callbacks on loopback (answers 200 unless told otherwise)."""
    receiver = CallbackReceiver()
    yield receiver
    receiver.close()
