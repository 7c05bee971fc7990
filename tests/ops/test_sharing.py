"""Sharing a cluster, measured with real workers: priorities and fair share between batches.

Each job's judge (``test_log``) appends a ``start`` line when a worker starts it,
so the log is the order in which the workers took the jobs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from support import logged_jobs, wait_until

from chalk_client import ChalkClient, JobStatus

CONCURRENCY = 4


def starts(log: Path) -> list[str]:
    """The jobs in the order they started."""
    return [line.split()[1] for line in log.read_text().splitlines() if line.startswith("start")]


@pytest.mark.slow
def test_high_jobs_start_before_every_waiting_normal_one(own_redis_url, start_worker, tmp_path):
    log = tmp_path / "starts.log"
    log.touch()
    start_worker(own_redis_url, concurrency=CONCURRENCY)
    client = ChalkClient(own_redis_url)
    backlog = client.submit_batch(logged_jobs("normal", 300, log, 0.01), batch_id="backlog")
    wait_until(lambda: len(starts(log)) >= 20, 30, "the backlog to be under way")
    urgent = client.submit_batch(
        logged_jobs("high", 5, log, 0.01), priority="high", batch_id="urgent"
    )
    sent_at = len(starts(log))
    assert [r.status for r in urgent.results(timeout=60)] == [JobStatus.SUCCEEDED] * 5
    order = starts(log)
    last_high = max(order.index(f"high-{i:03d}") for i in range(5))
    # Only what the worker had already taken when the high jobs came (at most a job per
    # slot) may start between their arrival and the last of them.
    normal_meanwhile = [key for key in order[sent_at : last_high + 1] if key.startswith("normal")]
    assert len(normal_meanwhile) <= CONCURRENCY, normal_meanwhile
    assert last_high < 100  # of 305 starts: far ahead of the backlog's end
    assert [r.status for r in backlog.results(timeout=120)] == [JobStatus.SUCCEEDED] * 300


@pytest.mark.slow
def test_a_small_batch_behind_a_big_one_takes_turns_with_it(own_redis_url, start_worker, tmp_path):
    log = tmp_path / "starts.log"
    log.touch()
    start_worker(own_redis_url, concurrency=CONCURRENCY)
    client = ChalkClient(own_redis_url)
    big = client.submit_batch(logged_jobs("big", 400, log, 0.01), batch_id="big")
    wait_until(lambda: len(starts(log)) >= 20, 30, "the big batch to be under way")
    small = client.submit_batch(logged_jobs("small", 16, log, 0.01), batch_id="small")
    sent_at = len(starts(log))
    assert [r.status for r in small.results(timeout=60)] == [JobStatus.SUCCEEDED] * 16
    order = starts(log)
    last_small = max(order.index(f"small-{i:03d}") for i in range(16))
    # In turn: one big job per small one, plus what the slots held when the small came.
    big_meanwhile = [key for key in order[sent_at : last_small + 1] if key.startswith("big")]
    assert len(big_meanwhile) <= 16 + CONCURRENCY, len(big_meanwhile)
    assert last_small < 120  # of 416 starts; first in, first out puts it past 400
    assert [r.status for r in big.results(timeout=120)] == [JobStatus.SUCCEEDED] * 400
    # Nothing of either batch is left waiting, in a lane or a ring.
    store = redis.Redis.from_url(own_redis_url)
    assert list(store.scan_iter("chalk:lane:*")) == list(store.scan_iter("chalk:ring:*")) == []


def test_an_unknown_priority_is_refused_before_anything_is_sent(own_redis_url):
    client = ChalkClient(own_redis_url)
    with pytest.raises(Exception, match="priority 'urgent' is not one of high, normal, low"):
        client.submit_batch(logged_jobs("x", 1, Path("/dev/null"), 0), priority="urgent")  # type: ignore[arg-type]
    assert redis.Redis.from_url(own_redis_url).dbsize() == 0
