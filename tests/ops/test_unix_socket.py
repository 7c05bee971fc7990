"""Redis over a Unix socket (``unix:///path/to/redis.sock?db=N``): client, worker and Celery.

A private redis-server listens on a socket only (no TCP port); a real ``chalk
worker`` scores a batch a client sent through it, ``chalk health`` finds the
worker, and Flower's app reads the same socket with kombu's own transport.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from processes import ROOT, WorkerFactory

from chalk_client import ChalkClient, JobStatus, ScoringJob
from chalk_client.cluster.connection import kombu_socket_url
from chalk_client.errors import ConfigurationError
from chalk_client.judges import AlwaysPassJudge
from chalk_client.settings import ChalkSettings
from chalk_worker.app import make_app, make_flower_app
from chalk_worker.testing.redis_server import stop


@pytest.fixture(scope="module")
def socket_url() -> Iterator[str]:
    """A redis-server on a Unix socket alone (``--port 0``); its ``unix://`` URL, db 5."""
    with tempfile.TemporaryDirectory(prefix="chalk-redis-sock-") as workdir:
        path = Path(workdir) / "redis.sock"
        command = ["redis-server", "--port", "0", "--unixsocket", str(path)]
        command += ["--unixsocketperm", "700", "--save", "", "--appendonly", "no", "--dir", workdir]
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert path.exists(), "redis-server made no socket"
            yield f"unix://{path}?db=5"
        finally:
            stop(proc)


def test_kombu_reads_a_unix_url_in_its_own_form() -> None:
    assert kombu_socket_url("unix:///run/redis/redis.sock?db=3") == (
        "redis+socket:///run/redis/redis.sock?virtual_host=3"
    )
    assert kombu_socket_url("unix://:secret@/run/r.sock", transport="chalk") == (
        "chalk+socket://:secret@/run/r.sock?virtual_host=0"
    )
    with pytest.raises(ConfigurationError, match="names no socket"):
        kombu_socket_url("unix://")


def test_the_apps_take_the_socket_through_their_transports() -> None:
    url = "unix:///run/redis/redis.sock?db=2"
    app = make_app(ChalkSettings(), url)
    assert app.conf.broker_url == "chalk+socket:///run/redis/redis.sock?virtual_host=2"
    assert app.conf.result_backend == "redis+socket:///run/redis/redis.sock?virtual_host=2"
    flower = make_flower_app(ChalkSettings(), url)
    assert flower.conf.broker_url == "redis+socket:///run/redis/redis.sock?virtual_host=2"
    assert flower.conf.broker_transport is None


@pytest.mark.slow
def test_a_worker_scores_a_batch_over_a_unix_socket(socket_url: str, tmp_path: Path) -> None:
    factory = WorkerFactory(tmp_path)
    try:
        factory(socket_url, concurrency=4)
        with ChalkClient(socket_url) as client:
            jobs = [ScoringJob(id=f"sock-{i}", judge=AlwaysPassJudge()) for i in range(6)]
            results = client.submit_batch(jobs).wait(timeout=60)
            assert {r.job_id for r in results} == {job.id for job in jobs}
            assert all(r.status is JobStatus.SUCCEEDED and r.score == 1.0 for r in results)
        health = subprocess.run(
            [sys.executable, "-m", "chalk_client.cli", "health"],
            cwd=ROOT,
            env={**os.environ, "CHALK_REDIS_URL": socket_url},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "workers: 1 alive" in health.stdout, health.stdout + health.stderr
    finally:
        factory.stop_all()
