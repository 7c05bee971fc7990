"""Batch throughput: Chalk Queue against a raw Celery no-op task, on the same Redis.

Both run on one private redis-server with the same worker pool (threads, 64 slots
by default), one at a time so they do not share the CPU:

- raw Celery: ``noop.delay()`` N times, then ``.get()`` on each;
- Chalk: ``submit_batch`` of N always-pass jobs, then ``.results()``.

Prints jobs/s for each and the ratio Chalk / raw (the goal is >= 1.0).

    .venv/bin/python -m bench.throughput [--jobs 2000] [--rounds 3]
                                         [--pool threads] [--concurrency 64] [--workers 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.cluster import (
    add_pool_arguments,
    chalk_workers,
    pool_flags,
    raw_noop,
    raw_workers,
    redis_server,
)
from bench.suite import Figure


def raw_round(jobs: int) -> float:
    """Jobs per second of ``delay()`` + ``get()`` through the raw Celery app."""
    from bench.raw_app import noop

    started = time.perf_counter()
    pending = [noop.delay() for _ in range(jobs)]
    for result in pending:
        result.get(timeout=120)
    return jobs / (time.perf_counter() - started)


def chalk_round(client: object, jobs: int) -> float:
    """Jobs per second of ``submit_batch`` + ``results()`` through Chalk."""
    from chalk_client import ScoringJob
    from chalk_client.judges import AlwaysPassJudge

    batch_jobs = [ScoringJob(judge=AlwaysPassJudge()) for _ in range(jobs)]
    started = time.perf_counter()
    batch = client.submit_batch(batch_jobs)  # type: ignore[attr-defined]
    batch.results(timeout=120)
    return jobs / (time.perf_counter() - started)


def measure(
    jobs: int, rounds: int, pool: list[str], workers: int
) -> tuple[list[float], list[float]]:
    """Jobs/s of each round, raw Celery then Chalk, on one private redis-server."""
    with redis_server() as url:
        noop = raw_noop(url)
        with raw_workers(url, pool, workers):
            noop.delay().get(timeout=60)  # warm-up: the worker is ready
            raw = [raw_round(jobs) for _ in range(rounds)]

        from chalk_client import ChalkClient, ScoringJob
        from chalk_client.judges import AlwaysPassJudge

        with chalk_workers(url, pool, workers), ChalkClient(url) as client:
            client.submit_and_wait(ScoringJob(judge=AlwaysPassJudge()), timeout=60)
            chalk = [chalk_round(client, jobs) for _ in range(rounds)]
    return raw, chalk


def figures(smoke: bool = False) -> list[Figure]:
    """The suite's figure: Chalk's batch throughput over raw Celery's (goal >= 1.0)."""
    jobs, rounds = (100, 1) if smoke else (2000, 3)
    raw, chalk = measure(jobs, rounds, ["--pool", "threads", "--concurrency", "64"], 1)
    return [
        Figure(
            name=f"batch throughput, {jobs} trivial jobs",
            value=f"{statistics.median(chalk):.0f} jobs/s",
            baseline=f"raw Celery {statistics.median(raw):.0f} jobs/s",
            ratio=statistics.median(chalk) / statistics.median(raw),
            goal=">= 1.0",
        )
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    add_pool_arguments(parser)
    args = parser.parse_args()
    pool = pool_flags(args)
    raw, chalk = measure(args.jobs, args.rounds, pool, args.workers)
    raw_best, chalk_best = max(raw), max(chalk)
    print(
        f"{args.workers} worker process(es), pool {args.pool}, concurrency {args.concurrency}; "
        f"{args.jobs} jobs x {args.rounds} rounds"
    )
    print(f"raw Celery no-op (delay + get): {', '.join(f'{r:.0f}' for r in raw)} jobs/s")
    print(f"Chalk (submit_batch + results): {', '.join(f'{r:.0f}' for r in chalk)} jobs/s")
    print(
        f"throughput ratio Chalk/raw: best {chalk_best / raw_best:.2f}, "
        f"median {statistics.median(chalk) / statistics.median(raw):.2f} (goal >= 1.0)"
    )


if __name__ == "__main__":
    main()
