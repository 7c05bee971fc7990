"""Processes for a benchmark: a private redis-server and workers, always cleaned up.

The redis-server is the one tests start too (``chalk_worker.testing.redis_server``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def worker(argv: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """A worker process, stopped (and its process group killed) on exit.

    The caller waits for it to be ready by scoring a first job: the warm-up.
    """
    log = tempfile.NamedTemporaryFile(prefix="bench-worker-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield proc
    except BaseException:
        print(Path(log.name).read_text()[-4000:], file=sys.stderr)
        raise
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        os.unlink(log.name)


COMMON = ["--loglevel", "WARNING", "--without-mingle", "--without-gossip"]


@contextmanager
def raw_workers(
    url: str, pool: list[str], count: int = 1
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` raw Celery baseline workers; yields their processes."""
    with ExitStack() as stack:
        procs = []
        for n in range(count):
            argv = [sys.executable, "-m", "celery", "-A", "bench.raw_app", "worker", *COMMON]
            argv += [*pool, "-n", f"raw{n}@%h"]
            procs.append(stack.enter_context(worker(argv, {"BENCH_REDIS_URL": url})))
        yield procs


@contextmanager
def stock_workers(url: str, count: int = 1) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` stock Celery workers (``bench.stock_app``), as a user would start them."""
    with ExitStack() as stack:
        procs = []
        for n in range(count):
            argv = [sys.executable, "-m", "celery", "-A", "bench.stock_app", "worker"]
            argv += [*STOCK_POOL, "-n", f"stock{n}@%h"]
            procs.append(stack.enter_context(worker(argv, {"BENCH_REDIS_URL": url})))
        yield procs


STOCK_POOL = ["--pool", "threads", "--concurrency", "16"]
"""The stock baseline's pool: threads, 16 of them; every other flag Celery's default."""


@contextmanager
def chalk_workers(
    url: str,
    pool: list[str],
    count: int = 1,
    env: dict[str, str] | None = None,
    *,
    defaults: bool = False,
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` Chalk workers, as ``chalk worker`` starts them (``env`` added to theirs).

    ``defaults``: ``chalk worker`` with nothing but ``pool`` and a name, its log
    level and its processes (one per core) included; else the quiet, quick-starting
    ``COMMON`` flags come first, and each worker is one process.
    """
    with ExitStack() as stack:
        procs = []
        for n in range(count):
            argv = [sys.executable, "-m", "chalk_client.cli", "worker"]
            argv += [] if defaults else [*COMMON, "--processes", "1"]
            argv += [*pool, "-n", f"chalk{n}@%h"]
            procs.append(stack.enter_context(worker(argv, {**(env or {}), "CHALK_REDIS_URL": url})))
        yield procs


def add_pool_arguments(parser: argparse.ArgumentParser) -> None:
    """The worker flags every queue benchmark takes: pool, concurrency, worker count."""
    parser.add_argument("--pool", default="threads")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--workers", type=int, default=1, help="worker processes of each kind")


def pool_flags(args: argparse.Namespace) -> list[str]:
    """The Celery flags for the pool ``add_pool_arguments`` parsed."""
    return ["--pool", args.pool, "--concurrency", str(args.concurrency)]


def raw_noop(url: str) -> Any:
    """The raw Celery baseline's no-op task, pointed at ``url``."""
    os.environ["BENCH_REDIS_URL"] = url
    from bench.raw_app import app, noop

    app.conf.broker_url = app.conf.result_backend = url
    return noop


def stock_noop(url: str) -> Any:
    """The stock Celery baseline's no-op task, pointed at ``url``."""
    os.environ["BENCH_REDIS_URL"] = url
    from bench.stock_app import app, noop

    app.conf.broker_url = app.conf.result_backend = url
    return noop


def cpu_seconds(url: str, procs: list[subprocess.Popen[bytes]]) -> dict[str, float]:
    """CPU seconds (user + system) used so far by this process, the workers and Redis.

    A worker's figure includes its pool's child processes (prefork), living or reaped;
    Redis reports its own (``INFO cpu``).
    """
    import psutil
    import redis

    def tree(pid: int) -> float:
        proc = psutil.Process(pid)
        times = proc.cpu_times()
        total = times.user + times.system + times.children_user + times.children_system
        for child in proc.children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                child_times = child.cpu_times()
                total += child_times.user + child_times.system
        return total

    own = psutil.Process().cpu_times()  # not its children: the workers and Redis are
    info = redis.Redis.from_url(url).info("cpu")
    return {
        "client": own.user + own.system,
        "workers": sum(tree(proc.pid) for proc in procs),
        "redis": float(info["used_cpu_user"]) + float(info["used_cpu_sys"]),
    }
