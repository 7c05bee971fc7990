"""Batch throughput: Chalk Queue against a raw Celery no-op task, on the same Redis.

Both run on one private redis-server with the same worker pool (threads, 64 slots
by default), one at a time so they do not share the CPU:

- raw Celery: ``noop.delay()`` N times, then ``.get()`` on each;
- Chalk: ``submit_batch`` of N always-pass jobs, then ``.results()``.

Prints jobs/s for each, the ratio Chalk / raw (the goal is >= 1.0), and the CPU
time each side spent per job in the client (this process), the workers and Redis:
on a machine with fewer cores than busy processes, that is what sets the rate.

    .venv/bin/python -m bench.throughput [--jobs 2000] [--rounds 3]
                                         [--pool threads] [--concurrency 64] [--workers 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.cluster import (
    add_pool_arguments,
    chalk_workers,
    cpu_seconds,
    pool_flags,
    raw_noop,
    raw_workers,
)
from bench.suite import Figure
from chalk_worker.testing.redis_server import redis_server


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


@dataclass
class Side:
    """One side's rounds: jobs/s each, and CPU seconds per job by process."""

    rates: list[float] = field(default_factory=list)
    cpu_per_job: dict[str, float] = field(default_factory=dict)

    def run(
        self, url: str, procs: list[Any], jobs: int, rounds: int, one: Callable[[], float]
    ) -> None:
        """Run ``rounds`` rounds of ``one()``, adding up the CPU time they used."""
        before = cpu_seconds(url, procs)
        self.rates = [one() for _ in range(rounds)]
        after = cpu_seconds(url, procs)
        self.cpu_per_job = {k: (after[k] - before[k]) / (jobs * rounds) for k in after}


def measure(jobs: int, rounds: int, pool: list[str], workers: int) -> tuple[Side, Side]:
    """Raw Celery's rounds, then Chalk's, on one private redis-server."""
    raw, chalk = Side(), Side()
    with redis_server() as url:
        noop = raw_noop(url)
        with raw_workers(url, pool, workers) as procs:
            noop.delay().get(timeout=60)  # warm-up: the worker is ready
            raw.run(url, procs, jobs, rounds, lambda: raw_round(jobs))

        from chalk_client import ChalkClient, ScoringJob
        from chalk_client.judges import AlwaysPassJudge

        with chalk_workers(url, pool, workers) as procs, ChalkClient(url) as client:
            client.submit_and_wait(ScoringJob(judge=AlwaysPassJudge()), timeout=60)
            chalk.run(url, procs, jobs, rounds, lambda: chalk_round(client, jobs))
    return raw, chalk


def figures(smoke: bool = False) -> list[Figure]:
    """The suite's figure: Chalk's batch throughput over raw Celery's (goal >= 1.0)."""
    jobs, rounds = (100, 1) if smoke else (2000, 3)
    raw, chalk = measure(jobs, rounds, ["--pool", "threads", "--concurrency", "64"], 1)
    return [
        Figure(
            name=f"batch throughput, {jobs} trivial jobs",
            value=f"{statistics.median(chalk.rates):.0f} jobs/s",
            baseline=f"raw Celery {statistics.median(raw.rates):.0f} jobs/s",
            ratio=statistics.median(chalk.rates) / statistics.median(raw.rates),
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
    raw_best, chalk_best = max(raw.rates), max(chalk.rates)
    print(
        f"{args.workers} worker process(es), pool {args.pool}, concurrency {args.concurrency}; "
        f"{args.jobs} jobs x {args.rounds} rounds"
    )
    for name, side in (("raw Celery no-op (delay + get)", raw), ("Chalk (submit_batch)", chalk)):
        cpu = ", ".join(f"{k} {v * 1e6:.0f}" for k, v in side.cpu_per_job.items())
        rates = ", ".join(f"{r:.0f}" for r in side.rates)
        print(f"{name}: {rates} jobs/s; CPU per job (µs): {cpu}")
    print(
        f"throughput ratio Chalk/raw: best {chalk_best / raw_best:.2f}, "
        f"median {statistics.median(chalk.rates) / statistics.median(raw.rates):.2f} "
        "(goal >= 1.0)"
    )


if __name__ == "__main__":
    main()
