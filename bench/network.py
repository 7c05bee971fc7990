"""A worker far from Redis: the same batch on a clean link and on a slow, lossy one.

Hosts in network namespaces on this machine (``chalk_worker.testing.network``):
Redis on one, the client on another (this process), and one worker at a time on
a host of its own, first over a clean link, then over one that delays what the
worker sends by 100 ms ± 30 ms and drops 3% of it (the defaults). Each round is
a batch of trivial jobs (always pass), timed from submit to the last result;
every job must end with one result. Prints jobs/s on each link and the ratio
slowed / clean (the goal is >= 0.5). Needs root and iproute2.

    .venv/bin/python -m bench.network [--jobs 600] [--rounds 2]
        [--delay-ms 100] [--jitter-ms 30] [--loss 0.03] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from contextlib import ExitStack

from bench.cluster import COMMON, worker
from bench.suite import Figure
from chalk_worker.testing.network import Host, Network, start_redis
from chalk_worker.testing.redis_server import stop


def batch_rate(client: object, jobs: int) -> float:
    """Jobs per second of one batch of ``jobs`` always-pass jobs, every one scored once."""
    from chalk_client import JobStatus, ScoringJob
    from chalk_client.judges import AlwaysPassJudge

    batch_jobs = [ScoringJob(judge=AlwaysPassJudge()) for _ in range(jobs)]
    started = time.perf_counter()
    results = client.submit_batch(batch_jobs).results(timeout=900)  # type: ignore[attr-defined]
    rate = jobs / (time.perf_counter() - started)
    ids = [result.job_id for result in results]
    if len(ids) != jobs or len(set(ids)) != jobs:
        raise RuntimeError(f"{jobs} jobs sent, {len(set(ids))} distinct results of {len(ids)}")
    if any(result.status is not JobStatus.SUCCEEDED for result in results):
        raise RuntimeError("a trivial job did not succeed")
    return rate


def rounds_on(host: Host, url: str, jobs: int, rounds: int, concurrency: int) -> list[float]:
    """Start a worker on ``host``, warm it up, then time ``rounds`` batches."""
    from chalk_client import ChalkClient

    argv = host.command(sys.executable, "-m", "chalk_client.cli", "worker", *COMMON)
    argv += ["--concurrency", str(concurrency), "-n", f"{host.name}@%h"]
    with ExitStack() as stack:
        stack.enter_context(worker(argv, {"CHALK_REDIS_URL": url}))
        client = stack.enter_context(ChalkClient(url))
        batch_rate(client, 20)  # warm-up: the worker is ready
        return [batch_rate(client, jobs) for _ in range(rounds)]


def measure(
    jobs: int, rounds: int, delay_ms: float, jitter_ms: float, loss: float, concurrency: int
) -> tuple[list[float], list[float]]:
    """Rates on the clean link, then on the slowed one."""
    with Network() as net:
        redis_host = net.add_host("redis")
        clean = net.add_host("near")
        far = net.add_host("far", delay_ms=delay_ms, jitter_ms=jitter_ms, loss=loss)
        net.add_host("client", netns=False)
        proc, url = start_redis(redis_host)
        try:
            near_rates = rounds_on(clean, url, jobs, rounds, concurrency)
            far_rates = rounds_on(far, url, jobs, rounds, concurrency)
        finally:
            stop(proc)
    return near_rates, far_rates


def figures(smoke: bool = False) -> list[Figure]:
    """The suite's figure: throughput on the slowed link over the clean one."""
    jobs, rounds = (100, 1) if smoke else (600, 2)
    near, far = measure(jobs, rounds, 100.0, 30.0, 0.03, 64)
    near_rate, far_rate = statistics.median(near), statistics.median(far)
    return [
        Figure(
            name=f"{jobs} trivial jobs, worker 100 ms ± 30 ms and 3% loss from Redis",
            value=f"{far_rate:.0f} jobs/s",
            baseline=f"clean link {near_rate:.0f} jobs/s",
            ratio=far_rate / near_rate,
            goal=">= 0.5",
        )
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--delay-ms", type=float, default=100.0)
    parser.add_argument("--jitter-ms", type=float, default=30.0)
    parser.add_argument("--loss", type=float, default=0.03)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    near, far = measure(
        args.jobs, args.rounds, args.delay_ms, args.jitter_ms, args.loss, args.concurrency
    )
    print(f"clean link:  {', '.join(f'{r:.1f}' for r in near)} jobs/s")
    print(f"slowed link: {', '.join(f'{r:.1f}' for r in far)} jobs/s")
    ratio = statistics.median(far) / statistics.median(near)
    print(f"slowed / clean: {ratio:.2f} (goal >= 0.5)")


if __name__ == "__main__":
    main()
