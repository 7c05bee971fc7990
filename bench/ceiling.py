"""How far one Redis goes: Redis commands and CPU per job, and a cluster run against it.

- *per job*: one ``chalk worker`` scores ``--jobs`` trivial jobs submitted as one
  batch; ``INFO commandstats`` counts every command Redis ran (those inside Lua
  scripts too) and ``INFO cpu`` its CPU time. Goal: at most 15 commands per job.
  From the CPU per job follows the ceiling: the jobs per second at which one
  Redis core is busy all the time.
- *a cluster*: ``--workers`` worker processes (each its own ``chalk worker``) score
  ``--big`` trivial jobs submitted as one batch; jobs per second, Redis's CPU
  share meanwhile (goal: under half a core, Redis is not what limits them), and
  the memory of the client and of Redis at their peak.

    .venv/bin/python -m bench.ceiling [--jobs 5000] [--big 100000] [--workers 2]
"""

from __future__ import annotations

import argparse
import resource
import threading
import time
from collections import Counter
from typing import Any

from bench.cluster import chalk_workers
from bench.suite import Figure
from chalk_worker.testing.redis_server import redis_server


def trivial(count: int) -> list[Any]:
    from chalk_client import ScoringJob
    from chalk_client.judges import AlwaysPassJudge

    return [ScoringJob(judge=AlwaysPassJudge()) for _ in range(count)]


def redis_cpu(store: Any) -> float:
    info = store.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def per_job(url: str, jobs: int) -> tuple[float, float, Counter[str]]:
    """Commands and Redis CPU seconds per trivial job, and the commands by name (per job)."""
    import redis

    from chalk_client import ChalkClient

    store = redis.Redis.from_url(url)
    with chalk_workers(url, ["--pool", "threads"]):
        client = ChalkClient(url)
        client.submit_batch(trivial(20)).results(timeout=120)
        time.sleep(1.0)  # the warm-up's acknowledgements and events are in
        store.config_resetstat()
        cpu = redis_cpu(store)
        client.submit_batch(trivial(jobs)).results(timeout=1200)
        time.sleep(1.0)
        cpu = redis_cpu(store) - cpu
        stats = store.info("commandstats")
        client.close()
    by_name: Counter[str] = Counter()
    for key, value in stats.items():
        by_name[key.removeprefix("cmdstat_")] = int(value["calls"])
    total = sum(by_name.values())
    # The keeper's renewals and presence refreshes run whatever the load: they are in the
    # count (a job-free second costs a few commands), which is what one Redis serves.
    return total / jobs, cpu / jobs, Counter({k: v / jobs for k, v in by_name.items()})


class Peaks(threading.Thread):
    """Samples Redis's used memory and this process's RSS while a batch runs."""

    def __init__(self, store: Any) -> None:
        super().__init__(daemon=True)
        self.store = store
        self.redis_bytes = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.1):
            memory = int(self.store.info("memory")["used_memory"])
            self.redis_bytes = max(self.redis_bytes, memory)


def cluster_run(url: str, jobs: int, workers: int) -> dict[str, float]:
    """Jobs per second of ``workers`` worker processes on one Redis, and what it cost."""
    import redis

    from chalk_client import ChalkClient

    store = redis.Redis.from_url(url)
    with chalk_workers(url, ["--pool", "threads"], count=workers):
        client = ChalkClient(url)
        client.submit_batch(trivial(20 * workers)).results(timeout=120)
        batch_jobs = trivial(jobs)
        peaks = Peaks(store)
        peaks.start()
        cpu = redis_cpu(store)
        started = time.perf_counter()
        client.submit_batch(batch_jobs).results(timeout=3600)
        elapsed = time.perf_counter() - started
        cpu = redis_cpu(store) - cpu
        peaks.stopped.set()
        peaks.join()
        client.close()
    return {
        "rate": jobs / elapsed,
        "redis_share": cpu / elapsed,
        "redis_mib": peaks.redis_bytes / (1 << 20),
        "client_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def figures(
    *, smoke: bool = False, jobs: int = 5000, big: int = 100_000, workers: int = 2
) -> list[Figure]:
    if smoke:
        jobs, big, workers = 200, 500, 1
    with redis_server() as url:
        commands, cpu, by_name = per_job(url, jobs)
    with redis_server() as url:
        run = cluster_run(url, big, workers)
    ceiling = 1 / cpu
    top = ", ".join(f"{name} {per:.2f}" for name, per in by_name.most_common(8))
    return [
        Figure(
            f"Redis commands per trivial job, end to end ({top}, ...)",
            f"{commands:.1f}",
            "counted by INFO commandstats",
            commands,
            "<= 15",
        ),
        Figure(
            "Redis CPU per trivial job, and the jobs/s one Redis core serves",
            f"{cpu * 1000:.3f} ms",
            f"ceiling {ceiling:.0f} jobs/s",
            cpu * 1000,
            "<= 0.5",
        ),
        Figure(
            f"{workers} worker processes, {big} trivial jobs on one Redis: Redis's busy share",
            f"{run['rate']:.0f} jobs/s, Redis busy {run['redis_share']:.0%}",
            f"Redis {run['redis_mib']:.0f} MiB peak, client {run['client_mib']:.0f} MiB",
            run["redis_share"],
            "< 0.5",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--big", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    from bench.suite import table

    print(table(figures(jobs=args.jobs, big=args.big, workers=args.workers)))


if __name__ == "__main__":
    main()
