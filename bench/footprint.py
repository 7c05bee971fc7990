"""What jobs cost Redis: while a batch is in flight, and once its jobs succeeded.

One private redis-server and one ``chalk worker``. Jobs carry a 10 KB transcript
of made-up words, which compresses less than real ones (an always-pass judge:
the transcript is stored, not read):

- *left after success*: ``--few`` jobs are scored; Redis's memory afterwards, less
  its memory before and less the memory of the result keys (``MEMORY USAGE``), per
  job. Goal: at most 1 KB per job beyond its result.
- *peak of a batch*: ``--jobs`` jobs submitted as one batch while the worker
  scores them; Redis's memory is sampled every 50 ms. The peak against the raw
  size of what was submitted (the jobs' JSON): goal under 1.3. When every job is
  done, the memory left against that of the results alone: goal under 1.2 (the
  batch's index of job ids is the rest).

    .venv/bin/python -m bench.footprint [--jobs 100000] [--few 1000]
"""

from __future__ import annotations

import argparse
import random
import string
import threading
import time
from typing import Any

from bench.cluster import chalk_workers
from bench.suite import Figure
from chalk_worker.testing.redis_server import redis_server

TRANSCRIPT_BYTES = 10 * 1024


def transcript_text() -> str:
    """10 KB of words drawn evenly from 2,000 made-up ones (fixed seed).

    zlib shrinks it only 1.75x, where real transcripts (prose, code, JSON tool
    calls) shrink 3x or more: Chalk stores long records compressed, and this
    text keeps the figures on the side of caution.
    """
    rng = random.Random(0)
    vocabulary = [
        "".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(2000)
    ]
    return " ".join(rng.choices(vocabulary, k=TRANSCRIPT_BYTES // 3))[:TRANSCRIPT_BYTES]


def make_jobs(prefix: str, count: int) -> list[Any]:
    """``count`` always-pass jobs, each with a 10 KB assistant message."""
    from chalk_client import Message, ScoringJob, Transcript
    from chalk_client.judges import AlwaysPassJudge

    transcript = Transcript(messages=[Message(role="assistant", content=transcript_text())])
    return [
        ScoringJob(id=f"{prefix}-{i}", transcript=transcript, judge=AlwaysPassJudge())
        for i in range(count)
    ]


def used_memory(store: Any) -> int:
    return int(store.info("memory")["used_memory"])


def results_memory(store: Any, ids: list[str]) -> int:
    """Bytes Redis uses for the result keys of ``ids`` (``MEMORY USAGE``, key overhead included)."""
    total = 0
    for start in range(0, len(ids), 1000):
        pipe = store.pipeline(transaction=False)
        for job_id in ids[start : start + 1000]:
            pipe.memory_usage(f"chalk:result:{job_id}", samples=0)
        total += sum(int(size or 0) for size in pipe.execute())
    return total


class Sampler(threading.Thread):
    """Samples Redis's used memory every 50 ms; ``peak`` is the highest seen."""

    def __init__(self, store: Any) -> None:
        super().__init__(daemon=True)
        self.store = store
        self.peak = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.05):
            self.peak = max(self.peak, used_memory(self.store))


def figures(*, smoke: bool = False, jobs: int = 100_000, few: int = 1000) -> list[Figure]:
    import redis

    from chalk_client import ChalkClient

    if smoke:
        jobs, few = 300, 100
    with redis_server() as url, chalk_workers(url, ["--pool", "threads"]):
        store = redis.Redis.from_url(url)
        client = ChalkClient(url)
        client.submit_batch(make_jobs("warm", 5)).results(timeout=120)
        time.sleep(0.5)

        # A job that succeeded: what is left beyond its result.
        batch = make_jobs("few", few)
        before = used_memory(store)
        client.submit_batch(batch).results(timeout=600)
        time.sleep(0.5)
        ids = [job.id for job in batch]
        result_bytes = results_memory(store, ids)
        left = (used_memory(store) - before - result_bytes) / few

        # A large batch: the peak while in flight, and what stays once done.
        batch = make_jobs("big", jobs)
        raw = sum(len(job.model_dump_json()) for job in batch)
        before = used_memory(store)
        sampler = Sampler(store)
        sampler.start()
        client.submit_batch(batch).results(timeout=3600)
        sampler.stopped.set()
        sampler.join()
        time.sleep(0.5)
        ids = [job.id for job in batch]
        done = used_memory(store) - before
        peak = max(sampler.peak, used_memory(store)) - before
        kept = results_memory(store, ids)
        client.close()
    mib = 1 << 20
    return [
        Figure(
            "Redis left by a succeeded job, 10 KB transcript, beyond its result",
            f"{left:.0f} B/job",
            f"result {result_bytes / few:.0f} B/job",
            left,
            "<= 1024",
        ),
        Figure(
            f"peak Redis memory, {jobs} jobs with 10 KB transcripts in flight",
            f"{peak / mib:.0f} MiB",
            f"{raw / mib:.0f} MiB submitted",
            peak / raw,
            "< 1.3",
        ),
        Figure(
            f"Redis memory once those {jobs} jobs are done",
            f"{done / mib:.1f} MiB",
            f"{kept / mib:.1f} MiB of results",
            done / kept,
            "< 1.2",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--few", type=int, default=1000)
    args = parser.parse_args()
    from bench.suite import table

    print(table(figures(jobs=args.jobs, few=args.few)))


if __name__ == "__main__":
    main()
