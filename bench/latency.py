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

from bench.cluster import chalk_workers, raw_workers, redis_server


def timed(call: Callable[[], object], count: int) -> list[float]:
    """Seconds of each of ``count`` sequential calls."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pool", default="threads")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--workers", type=int, default=1, help="worker processes of each kind")
    args = parser.parse_args()
    pool = ["--pool", args.pool, "--concurrency", str(args.concurrency)]
    with redis_server() as url:
        import os

        os.environ["BENCH_REDIS_URL"] = url
        from bench.raw_app import app, noop

        app.conf.broker_url = app.conf.result_backend = url
        with raw_workers(url, pool, args.workers):
            timed(lambda: noop.delay().get(timeout=60), 20)  # warm-up
            raw = [
                timed(lambda: noop.delay().get(timeout=60), args.requests)
                for _ in range(args.rounds)
            ]

        from chalk_client import ChalkClient, ScoringJob
        from chalk_client.judges import AlwaysPassJudge

        with chalk_workers(url, pool, args.workers), ChalkClient(url) as client:

            def one() -> object:
                return client.submit_and_wait(ScoringJob(judge=AlwaysPassJudge()), timeout=60)

            one_first = client.submit_and_wait(ScoringJob(judge=AlwaysPassJudge()), timeout=60)
            assert one_first.status == "succeeded"
            timed(one, 20)  # warm-up
            chalk = [timed(one, args.requests) for _ in range(args.rounds)]

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
