"""Results stored many per round trip, acknowledged after (``cluster.finisher``)."""

from __future__ import annotations

import threading

import redis

from chalk_client import ChalkClient, ChalkSettings, JobResult, JobStatus, ScoringJob
from chalk_client.judges import AlwaysPassJudge
from chalk_worker.cluster.finisher import PENDING, Finisher
from chalk_worker.cluster.leases import LeaseStore

OWNER = "test:1:finisher"


def test_results_are_stored_once_each_and_acks_wait_for_them(own_redis_url: str) -> None:
    settings = ChalkSettings(redis_url=own_redis_url)
    client = ChalkClient(own_redis_url)
    jobs = [ScoringJob(id=f"fin-{i}", judge=AlwaysPassJudge()) for i in range(50)]
    client.submit_batch(jobs)
    leases = LeaseStore(redis.Redis.from_url(own_redis_url), settings)
    for job in jobs:
        leases.start(job.id, OWNER)
    stored: list[tuple[str, bool | None]] = []
    done = threading.Event()
    acked: list[str] = []

    def on_stored(
        result: JobResult, written: bool | None, error: object, gave_up: bool = False
    ) -> None:
        stored.append((result.job_id, written))
        PENDING.done(result.job_id)
        if len(stored) == 51:
            done.set()

    finisher = Finisher(leases, OWNER, own_redis_url, on_stored)
    for job in jobs:
        finisher.submit(JobResult(job_id=job.id, status=JobStatus.SUCCEEDED, metadata={"run": 1}))
        assert PENDING.after_stored(job.id, lambda job_id=job.id: acked.append(job_id))  # type: ignore[misc]
    finisher.submit(JobResult(job_id="fin-0", status=JobStatus.SUCCEEDED, metadata={"run": 2}))
    assert done.wait(20)
    assert sorted(acked) == sorted(job.id for job in jobs)
    assert [written for job_id, written in stored if job_id == "fin-0"] == [True, False]
    scores = {job.id: client.get(job.id) for job in jobs}
    assert all(r is not None and r.metadata == {"run": 1} for r in scores.values()), scores
    assert not PENDING.after_stored("fin-1", lambda: None)  # nothing waits: the caller acks


def test_the_finisher_gives_up_on_an_unreachable_redis_when_told() -> None:
    settings = ChalkSettings()
    leases = LeaseStore(redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2), settings)
    outcomes: list[tuple[bool | None, bool]] = []
    give_up = threading.Event()
    finisher = Finisher(
        leases,
        OWNER,
        "redis://127.0.0.1:1/0",
        lambda result, written, error, gave_up=False: outcomes.append((written, gave_up)),
        give_up,
    )
    finisher.submit(JobResult(job_id="lost-1", status=JobStatus.SUCCEEDED))
    assert not finisher.flush(timeout=1.5)  # retrying: Redis is away
    give_up.set()
    assert finisher.flush(timeout=10)
    assert outcomes == [(None, True)]
