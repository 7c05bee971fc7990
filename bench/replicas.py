"""What waiting for a replica costs: ``CHALK_REDIS_WAIT_REPLICAS=1`` against 0.

A master and one replica (both on this machine, so the wait is a local round
trip plus the replica's work, the least it can be), one ``chalk worker``, and
``--jobs`` trivial jobs submitted as one batch and waited for, first without
waiting for the replica, then with: the submit's time and the batch's time end
to end, each as a ratio of the run without waiting.

    .venv/bin/python -m bench.replicas [--jobs 5000]
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any
from urllib.parse import urlsplit

from bench.ceiling import trivial
from bench.cluster import chalk_workers
from bench.suite import Figure
from chalk_worker.testing.redis_server import redis_server


def wait_for_replica(master: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while str(master.info("replication").get("slave0", {}).get("state")) != "online":
        if time.monotonic() > deadline:
            raise RuntimeError("the replica did not catch up with the master")
        time.sleep(0.1)


def timed_run(url: str, jobs: int, replicas: int) -> tuple[float, float]:
    """Seconds to submit ``jobs`` trivial jobs, and to have all their results."""
    from chalk_client import ChalkClient, ChalkSettings

    env = {"CHALK_REDIS_WAIT_REPLICAS": str(replicas)}
    with chalk_workers(url, ["--pool", "threads"], env=env):
        client = ChalkClient(url, settings=ChalkSettings(redis_wait_replicas=replicas))
        client.submit_batch(trivial(20)).results(timeout=120)  # the warm-up
        made = trivial(jobs)
        started = time.perf_counter()
        batch = client.submit_batch(made)
        submitted = time.perf_counter() - started
        batch.results(timeout=1800)
        done = time.perf_counter() - started
        client.close()
    return submitted, done


def figures(*, smoke: bool = False, jobs: int = 5000) -> list[Figure]:
    import redis

    if smoke:
        jobs = 200
    with redis_server() as url:
        port = urlsplit(url).port
        with redis_server("--replicaof", "127.0.0.1", str(port)):
            wait_for_replica(redis.Redis.from_url(url))
            os.environ.pop("CHALK_REDIS_WAIT_REPLICAS", None)
            plain = timed_run(url, jobs, 0)
            waiting = timed_run(url, jobs, 1)
    return [
        Figure(
            f"submit of {jobs} trivial jobs, waiting for 1 replica",
            f"{waiting[0]:.2f} s",
            f"{plain[0]:.2f} s without waiting",
            waiting[0] / plain[0],
            "<= 2.0",
        ),
        Figure(
            f"{jobs} trivial jobs end to end, waiting for 1 replica (submit, results, reads)",
            f"{jobs / waiting[1]:.0f} jobs/s",
            f"{jobs / plain[1]:.0f} jobs/s without waiting",
            waiting[1] / plain[1],
            "<= 1.5",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    args = parser.parse_args()
    from bench.suite import table

    print(table(figures(jobs=args.jobs)))


if __name__ == "__main__":
    main()
