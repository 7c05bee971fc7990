"""Processes the tests start, and what a test does without them.

redis-server on free ports (the starter benchmarks use too,
``chalk_worker.testing.redis_server``); ``chalk worker`` processes with the
test judges of ``cluster_judges`` loaded; ``chalk score`` inside a test cgroup.
The fixtures that hand them to tests are in ``conftest.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from chalk_client import JobResult, ScoringJob
from chalk_worker.testing.redis_server import free_port, start_redis, stop, wait_port

IN_CI = os.environ.get("CI") == "true"

ROOT = Path(__file__).resolve().parents[1]
"""The project's folder."""
TESTS = Path(__file__).resolve().parent

__all__ = ["IN_CI", "free_port", "need", "start_redis", "stop", "wait_port"]


def need(what: str) -> None:
    """Skip the test for lack of ``what``, or fail under CI."""
    if IN_CI:
        pytest.fail(f"{what} is required under CI=true")
    pytest.skip(f"{what} is not available")


def clear(url: str, queue: str = "chalk") -> None:
    """Delete every Chalk key and the queue's messages (kombu's bindings stay)."""
    client = redis.Redis.from_url(url)
    keys = list(client.scan_iter("chalk:*", count=1000))
    for start in range(0, len(keys), 1000):
        client.delete(*keys[start : start + 1000])
    client.delete(queue)
    client.close()


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
        on_host: Callable[..., list[str]] | None = None,
    ) -> Worker:
        """Start a worker (``on_host``: a ``Host.command`` of ``chalk_worker.testing.network``,
        to run it on that host)."""
        name = f"w{len(self.started) + 1}-{uuid.uuid4().hex[:6]}"
        log = self.logs / f"{name}.log"
        full_env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("CHALK_")},
            "CHALK_REDIS_URL": redis_url,
            "CHALK_LEASE_S": "2",
            "CHALK_TASK_MODULES": "cluster_judges",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])),
            **(env or {}),
        }
        with log.open("wb") as out:
            argv = [
                sys.executable,
                "-m",
                "chalk_client.cli",
                "worker",
                "-n",
                f"{name}@%h",
                *(["--concurrency", str(concurrency)] if concurrency else []),
                "-l",
                "info",
                # One process per worker unless the test asks for more: what it kills is the worker.
                *([] if "--processes" in args else ["--processes", "1"]),
                *args,
            ]
            proc = subprocess.Popen(
                on_host(*argv) if on_host is not None else argv,
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


def score_capped(
    jobs: list[ScoringJob], cap: list[Path], tmp_path: Path, **env: str
) -> dict[str, JobResult]:
    """Score ``jobs`` with ``chalk score`` in a worker process inside the test cap."""
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text("".join(job.model_dump_json() + "\n" for job in jobs))
    fds = [os.open(folder / "cgroup.procs", os.O_WRONLY) for folder in cap]

    def join() -> None:
        for fd in fds:
            os.write(fd, str(os.getpid()).encode())

    environment = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("CHALK_") or k == "CHALK_WARM_PYTHON"  # set by python_start
    }
    environment.update({"CHALK_SANDBOX_PATHS": str(tmp_path), **env})
    try:
        done = subprocess.run(
            [sys.executable, "-m", "chalk_client.cli", "score", str(rollouts)],
            capture_output=True,
            text=True,
            env=environment,
            preexec_fn=join,
            timeout=240,
        )
    finally:
        for fd in fds:
            os.close(fd)
    results = [JobResult.model_validate_json(line) for line in done.stdout.splitlines()]
    assert len(results) == len(jobs), done.stderr
    return {result.job_id: result for result in results}
