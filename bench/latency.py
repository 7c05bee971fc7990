"""Round trip: Chalk's ``submit_and_wait`` against a raw Celery no-op ``delay().get()``.

Both on one private redis-server, same worker pool, one request at a time,
one system at a time. Prints the median and mean round trip of each and the
ratio Chalk / raw (the goal is <= 1.5).

    .venv/bin/python -m bench.latency [--requests 500] [--rounds 3]
                                      [--pool threads] [--concurrency 64] [--workers 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from bench.cluster import (
    add_pool_arguments,
    chalk_workers,
    pool_flags,
    raw_noop,
    raw_workers,
)
from bench.suite import Figure
from chalk_worker.testing.redis_server import redis_server


def timed(call: Callable[[], object], count: int) -> list[float]:
    """Seconds of each of ``count`` sequential calls."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return times


def measure(
    requests: int, rounds: int, pool: list[str], workers: int
) -> tuple[list[list[float]], list[list[float]]]:
    """Seconds of each round trip, per round: raw Celery, then Chalk, on one private Redis."""
    with redis_server() as url:
        noop = raw_noop(url)
        with raw_workers(url, pool, workers):
            timed(lambda: noop.delay().get(timeout=60), 20)  # warm-up
            raw = [timed(lambda: noop.delay().get(timeout=60), requests) for _ in range(rounds)]

        from chalk_client import ChalkClient, ScoringJob
        from chalk_client.judges import AlwaysPassJudge

        with chalk_workers(url, pool, workers), ChalkClient(url) as client:

            def one() -> object:
                return client.submit_and_wait(ScoringJob(judge=AlwaysPassJudge()), timeout=60)

            timed(one, 20)  # warm-up
            chalk = [timed(one, requests) for _ in range(rounds)]
    return raw, chalk


def figures(smoke: bool = False) -> list[Figure]:
    """The suite's figure: ``submit_and_wait`` round trip over raw Celery's (goal <= 1.5)."""
    requests, rounds = (30, 1) if smoke else (500, 3)
    raw, chalk = measure(requests, rounds, ["--pool", "threads", "--concurrency", "64"], 1)
    raw_ms = statistics.median([t for r in raw for t in r]) * 1000
    chalk_ms = statistics.median([t for r in chalk for t in r]) * 1000
    return [
        Figure(
            name="submit_and_wait round trip",
            value=f"{chalk_ms:.2f} ms",
            baseline=f"raw Celery {raw_ms:.2f} ms",
            ratio=chalk_ms / raw_ms,
            goal="<= 1.5",
        )
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    add_pool_arguments(parser)
    args = parser.parse_args()
    pool = pool_flags(args)
    raw, chalk = measure(args.requests, args.rounds, pool, args.workers)

    def ms(values: list[float]) -> str:
        median, mean = statistics.median(values) * 1000, statistics.mean(values) * 1000
        return f"median {median:.2f} ms, mean {mean:.2f} ms"

    print(
        f"{args.workers} worker process(es), pool {args.pool}, concurrency {args.concurrency}; "
        f"{args.requests} requests x {args.rounds} rounds"
    )
    for name, rounds in (
        ("raw Celery no-op, delay().get()", raw),
        ("Chalk submit_and_wait", chalk),
    ):
        print(f"{name}: " + "; ".join(ms(r) for r in rounds))
    raw_all = [t for r in raw for t in r]
    chalk_all = [t for r in chalk for t in r]
    best = min(statistics.median(r) for r in chalk) / min(statistics.median(r) for r in raw)
    overall = statistics.median(chalk_all) / statistics.median(raw_all)
    print(
        f"round trip ratio Chalk/raw: median {overall:.2f}, "
        f"best-round median {best:.2f} (goal <= 1.5)"
    )


if __name__ == "__main__":
    main()
