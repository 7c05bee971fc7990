"""Sharing a cluster: a small batch behind a big one, and many batches at once.

One private redis-server, one ``chalk worker`` (threads pool), trivial jobs:

- **behind a big batch**: a 400-job batch is sent, then a 16-job one. The time
  until the small batch has every result, as its own batch (fair share: it takes
  turns with the big one), over the same 16 jobs sent as part of the big batch
  (first in, first out: they wait for all of it). Goal: at most a quarter.
- **many batches**: 2,000 jobs as 20 batches of 100 sent at once (the workers turn
  from lane to lane), over the same jobs as one batch. Goal: no measurable cost
  (at least 0.95).

    .venv/bin/python -m bench.sharing [--big 400] [--small 16] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from bench.cluster import chalk_workers
from bench.suite import Figure
from chalk_worker.testing.redis_server import redis_server

POOL = ["--pool", "threads", "--concurrency", "16"]


def _jobs(count: int) -> list[object]:
    from chalk_client import ScoringJob
    from chalk_client.judges import AlwaysPassJudge

    return [ScoringJob(judge=AlwaysPassJudge()) for _ in range(count)]


def small_behind_big(client: object, big: int, small: int, fair: bool) -> float:
    """Seconds until the small batch has every result, sent right after the big one; not
    ``fair``: its jobs go in the big batch (the big batch's lane, first in, first out)."""
    big_id = "big-" + uuid.uuid4().hex[:8]
    client.submit_batch(_jobs(big), batch_id=big_id)  # type: ignore[attr-defined]
    started = time.perf_counter()
    batch = client.submit_batch(  # type: ignore[attr-defined]
        _jobs(small), batch_id=None if fair else big_id
    )
    wanted = {job_id for job_id in batch.job_ids}
    for result in batch.as_completed(timeout=300):
        wanted.discard(result.job_id)
        if not wanted:
            break
    took = time.perf_counter() - started
    client.batch(big_id).results(timeout=300)  # type: ignore[attr-defined]
    return took


def many_batches(client: object, jobs: int, batches: int) -> float:
    """Jobs per second of ``jobs`` trivial jobs sent as ``batches`` batches at once."""
    size = jobs // batches
    started = time.perf_counter()
    sent = [client.submit_batch(_jobs(size)) for _ in range(batches)]  # type: ignore[attr-defined]
    for batch in sent:
        batch.results(timeout=300)
    return size * batches / (time.perf_counter() - started)


def measure(big: int, small: int, jobs: int, rounds: int) -> dict[str, list[float]]:
    """Each figure's rounds, interleaved."""
    from chalk_client import ChalkClient

    found: dict[str, list[float]] = {"fair": [], "fifo": [], "many": [], "one": []}
    with redis_server() as url, chalk_workers(url, POOL) as _, ChalkClient(url) as client:
        client.submit_batch(_jobs(20)).results(timeout=60)  # warm-up: the worker is ready
        for _ in range(rounds):
            found["fifo"].append(small_behind_big(client, big, small, fair=False))
            found["fair"].append(small_behind_big(client, big, small, fair=True))
            found["one"].append(many_batches(client, jobs, 1))
            found["many"].append(many_batches(client, jobs, 20))
    return found


def figures(smoke: bool = False) -> list[Figure]:
    """The suite's figures: the small batch's wait, and the cost of many batches."""
    big, small, jobs, rounds = (60, 4, 100, 1) if smoke else (400, 16, 2000, 3)
    found = measure(big, small, jobs, rounds)
    fair, fifo = statistics.median(found["fair"]), statistics.median(found["fifo"])
    many, one = statistics.median(found["many"]), statistics.median(found["one"])
    return [
        Figure(
            name=f"{small}-job batch behind a {big}-job one: time to its last result",
            value=f"{fair:.2f} s (fair share)",
            baseline=f"{fifo:.2f} s (first in, first out)",
            ratio=fair / fifo,
            goal="<= 0.25",
        ),
        Figure(
            name=f"{jobs} trivial jobs as 20 batches at once",
            value=f"{many:.0f} jobs/s",
            baseline=f"one batch {one:.0f} jobs/s",
            ratio=many / one,
            goal=">= 0.95",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big", type=int, default=400)
    parser.add_argument("--small", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    found = measure(args.big, args.small, args.jobs, args.rounds)
    for name, values in found.items():
        shown = ", ".join(f"{v:.3f}" for v in values)
        print(f"{name:5} median {statistics.median(values):.3f}  ({shown})")
    fair, fifo = statistics.median(found["fair"]), statistics.median(found["fifo"])
    print(f"small batch, fair share over first in first out: {fair / fifo:.2f} (goal <= 0.25)")
    many, one = statistics.median(found["many"]), statistics.median(found["one"])
    print(f"20 batches at once over one batch: {many / one:.2f} (goal >= 0.95)")


if __name__ == "__main__":
    main()
