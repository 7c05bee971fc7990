"""Batch throughput: Chalk Queue against two Celery apps with a no-op task, on one Redis.

Three sides, each with its workers running on one private redis-server, their
rounds taken in turn (stock, Chalk-like, Chalk, stock, ...) so that a change in
the machine's load falls on all three alike:

- stock Celery (``bench.stock_app``): the app a user would write instead, every
  setting Celery's default, ``celery worker --pool threads --concurrency 16``;
  ``noop.delay()`` N times, then ``.get()`` on each. Goal: Chalk >= 1.5x;
- Chalk-like Celery (``bench.raw_app``): a raw app configured as Chalk is (late
  acks, a prefetch of one per slot, events on), on Chalk's pool (threads, 64
  slots by default); the same calls. Goal: Chalk >= 1.0x;
- Chalk: one ``chalk worker`` at its defaults, so one worker process per usable
  core (``--pool``/``--concurrency`` passed through when given); ``submit_batch`` of
  N always-pass jobs, then ``.results()``.

Prints jobs/s for each round, the ratios (median of the rounds' ratios), and the
CPU time each side spent per job in the client (this process), its workers and
Redis: on a machine with fewer cores than busy processes, that is what sets the rate.

    .venv/bin/python -m bench.throughput [--jobs 2000] [--rounds 5]
                                         [--pool threads] [--concurrency 64] [--workers 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from bench.cluster import (
    STOCK_POOL,
    add_pool_arguments,
    chalk_workers,
    cpu_seconds,
    pool_flags,
    raw_noop,
    raw_workers,
    stock_noop,
    stock_workers,
)
from bench.suite import Figure
from chalk_client.cores import usable_cores
from chalk_worker.testing.redis_server import redis_server

STOCK_GOAL = 1.5
"""Chalk's jobs/s over stock Celery's."""
CHALK_LIKE_GOAL = 1.0
"""Chalk's jobs/s over the Chalk-like raw app's."""


def celery_round(noop: Any, jobs: int) -> float:
    """Jobs per second of ``delay()`` + ``get()`` of a Celery no-op task."""
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
    """One side: its workers, how it runs a round, its rates and CPU seconds per job."""

    name: str
    procs: list[Any]
    one: Callable[[], float]
    rates: list[float] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds by process kind, over every round."""

    def run(self, url: str) -> None:
        """One round, its CPU time added to the side's."""
        before = cpu_seconds(url, self.procs)
        self.rates.append(self.one())
        after = cpu_seconds(url, self.procs)
        for kind, seconds in after.items():
            self.cpu[kind] = self.cpu.get(kind, 0.0) + seconds - before[kind]

    def cpu_per_job(self, jobs: int) -> dict[str, float]:
        return {kind: seconds / (jobs * len(self.rates)) for kind, seconds in self.cpu.items()}


@dataclass(frozen=True)
class Measured:
    stock: Side
    chalk_like: Side
    chalk: Side

    def ratios(self, baseline: Side) -> list[float]:
        """Chalk's rate over ``baseline``'s, round by round."""
        return [c / b for c, b in zip(self.chalk.rates, baseline.rates, strict=True)]


def measure(jobs: int, rounds: int, pool: list[str], workers: int) -> Measured:
    """The three sides' rounds, in turn, on one private redis-server."""
    from chalk_client import ChalkClient, ScoringJob
    from chalk_client.judges import AlwaysPassJudge

    with redis_server() as url, ExitStack() as stack:
        stock, raw = stock_noop(url), raw_noop(url)
        stock_procs = stack.enter_context(stock_workers(url, workers))
        raw_procs = stack.enter_context(raw_workers(url, pool, workers))
        chalk_procs = stack.enter_context(chalk_workers(url, pool, workers, defaults=True))
        client = stack.enter_context(ChalkClient(url))
        # Warm-up: every worker is ready and has done one job.
        stock.delay().get(timeout=60)
        raw.delay().get(timeout=60)
        client.submit_and_wait(ScoringJob(judge=AlwaysPassJudge()), timeout=60)
        run = Measured(
            Side("stock Celery", stock_procs, lambda: celery_round(stock, jobs)),
            Side("Chalk-like Celery", raw_procs, lambda: celery_round(raw, jobs)),
            Side("Chalk", chalk_procs, lambda: chalk_round(client, jobs)),
        )
        for _ in range(rounds):
            for side in (run.stock, run.chalk_like, run.chalk):
                side.run(url)
    return run


def figures(smoke: bool = False) -> list[Figure]:
    """Chalk's batch throughput over stock Celery's (>= 1.5) and the Chalk-like app's (>= 1.0)."""
    jobs, rounds = (100, 1) if smoke else (2000, 5)
    run = measure(jobs, rounds, [], 1)
    chalk = f"{statistics.median(run.chalk.rates):.0f} jobs/s"
    return [
        Figure(
            name=f"batch throughput, {jobs} trivial jobs, against stock Celery (threads, -c 16)",
            value=chalk,
            baseline=f"stock Celery {statistics.median(run.stock.rates):.0f} jobs/s",
            ratio=statistics.median(run.ratios(run.stock)),
            goal=f">= {STOCK_GOAL:g}",
        ),
        Figure(
            name=f"batch throughput, {jobs} trivial jobs, against Celery configured like Chalk",
            value=chalk,
            baseline=f"Chalk-like Celery {statistics.median(run.chalk_like.rates):.0f} jobs/s",
            ratio=statistics.median(run.ratios(run.chalk_like)),
            goal=f">= {CHALK_LIKE_GOAL:g}",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    add_pool_arguments(parser)
    args = parser.parse_args()
    pool = pool_flags(args)
    run = measure(args.jobs, args.rounds, pool, args.workers)
    processes = usable_cores() if args.pool == "threads" else 1
    print(
        f"{args.workers} worker(s) a side; Chalk and Chalk-like: pool {args.pool}, "
        f"concurrency {args.concurrency} (each chalk worker in {processes} processes, its "
        f"default here); stock: {' '.join(STOCK_POOL)}; "
        f"{args.jobs} jobs x {args.rounds} rounds, taken in turn"
    )
    for side in (run.stock, run.chalk_like, run.chalk):
        cpu = ", ".join(f"{k} {v * 1e6:.0f}" for k, v in side.cpu_per_job(args.jobs).items())
        rates = ", ".join(f"{r:.0f}" for r in side.rates)
        print(f"{side.name}: {rates} jobs/s; CPU per job (µs): {cpu}")
    for baseline, goal in ((run.stock, STOCK_GOAL), (run.chalk_like, CHALK_LIKE_GOAL)):
        ratios = run.ratios(baseline)
        print(
            f"Chalk / {baseline.name}: {', '.join(f'{r:.2f}' for r in ratios)}; "
            f"median {statistics.median(ratios):.2f} (goal >= {goal:g})"
        )


if __name__ == "__main__":
    main()
