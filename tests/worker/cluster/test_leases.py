"""The lease scripts on a real Redis, without Celery: one result per job, whatever happens."""

from __future__ import annotations

import threading
import time

import redis

from chalk_client import ChalkClient, ChalkSettings, JobResult, JobStatus, ScoringJob
from chalk_client.cluster import keys
from chalk_client.judges import AlwaysPassJudge
from chalk_worker.cluster.leases import LeaseStore


def setup(url: str, job_id: str = "j") -> LeaseStore:
    settings = ChalkSettings(lease_s=0.3, queue="no-worker-here")
    ChalkClient(url, settings=settings).submit(ScoringJob(id=job_id, judge=AlwaysPassJudge()))
    return LeaseStore(redis.Redis.from_url(url), settings)


def result(job_id: str, worker: str) -> JobResult:
    return JobResult(job_id=job_id, status=JobStatus.SUCCEEDED, worker=worker)


def test_a_held_lease_turns_other_starts_away_until_it_expires(own_redis_url):
    leases = setup(own_redis_url)
    first = leases.start("j", "worker-a")
    assert (first.outcome, first.attempts) == ("start", 1)
    assert ScoringJob.model_validate_json(first.record).id == "j"
    assert leases.start("j", "worker-b").outcome == "busy"
    assert leases.start("j", "worker-a").outcome == "busy"  # a redelivery to the same worker
    time.sleep(0.2)
    assert leases.heartbeat(["j"], "worker-a") == []  # renewed: still ours
    time.sleep(0.2)
    assert leases.start("j", "worker-b").outcome == "busy"
    time.sleep(0.4)
    expired = leases.reap()  # worker-a stopped renewing
    assert [one.job_id for one in expired] == ["j"]
    assert [answer for _, answer, _ in leases.requeue(expired, "no-worker-here")] == ["requeued"]
    assert leases.reap() == []  # sent again once
    assert [answer for _, answer, _ in leases.requeue(expired, "no-worker-here")] == ["gone"]
    assert redis.Redis.from_url(own_redis_url).llen("no-worker-here") == 2  # submitted, then sent
    second = leases.start("j", "worker-b")
    assert (second.outcome, second.attempts) == ("start", 2)
    assert leases.heartbeat(["j"], "worker-a") == ["j"]  # worker-a learns it lost the job


def test_only_the_first_result_is_written(own_redis_url):
    leases = setup(own_redis_url)
    leases.start("j", "worker-a")
    assert leases.finish(result("j", "worker-a"), "worker-a") is True
    assert leases.finish(result("j", "worker-b"), "worker-b") is False
    stored = JobResult.model_validate_json(
        redis.Redis.from_url(own_redis_url).get("chalk:result:j")
    )
    assert stored.worker == "worker-a"
    assert leases.start("j", "worker-c").outcome == "done"
    assert leases.heartbeat(["j"], "worker-a") == []  # finished, not lost
    assert redis.Redis.from_url(own_redis_url).zcard("chalk:running") == 0


def test_a_job_nobody_submitted_is_missing(own_redis_url):
    leases = setup(own_redis_url)
    assert leases.start("never", "worker-a").outcome == "missing"


def test_scripts_are_loaded_again_after_redis_forgets_them(own_redis_url):
    leases = setup(own_redis_url)
    redis.Redis.from_url(own_redis_url).script_flush()
    assert leases.start("j", "worker-a").outcome == "start"
    redis.Redis.from_url(own_redis_url).script_flush()
    client = ChalkClient(own_redis_url, settings=ChalkSettings(queue="no-worker-here"))
    assert client.submit(ScoringJob(id="k", judge=AlwaysPassJudge())).job_id == "k"


def test_jobs_started_and_finished_at_once_by_many_threads_each_get_their_own_reply(
    own_redis_url,
):
    settings = ChalkSettings(lease_s=30, queue="no-worker-here")
    ids = [f"job-{i}" for i in range(64)]
    ChalkClient(own_redis_url, settings=settings).submit_batch(
        [ScoringJob(id=job_id, judge=AlwaysPassJudge()) for job_id in ids]
    )
    leases = LeaseStore(redis.Redis.from_url(own_redis_url), settings)
    barrier = threading.Barrier(len(ids))
    seen: dict[str, tuple[str, str, bool, bool]] = {}

    def one(job_id: str) -> None:
        barrier.wait()
        start = leases.start(job_id, "worker-a")
        record = ScoringJob.model_validate_json(start.record).id
        finished = leases.finish(result(job_id, "worker-a"), "worker-a")
        again = leases.finish(result(job_id, "worker-a"), "worker-a")
        seen[job_id] = (start.outcome, record or "", finished, again)

    threads = [threading.Thread(target=one, args=(job_id,)) for job_id in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert seen == {job_id: ("start", job_id, True, False) for job_id in ids}


def test_starting_a_job_marks_its_message_delivered(own_redis_url):
    # A submit whose publish failed releases the job only while this mark is there:
    # once a worker started the job, its message was delivered after all.
    leases = setup(own_redis_url)
    store = redis.Redis.from_url(own_redis_url)
    store.hset(keys.job("j"), "unpublished", "waiter-1")
    assert leases.start("j", "worker-a").outcome == "start"
    assert store.hget(keys.job("j"), "unpublished") is None


def test_a_record_that_cannot_be_read_ends_failed_not_retried(own_redis_url):
    import asyncio

    from chalk_client.cluster.leases import Start, StartOutcome
    from chalk_worker.cluster.consume import WorkerRuntime
    from chalk_worker.cluster.keeper import Resender

    runtime = WorkerRuntime(ChalkSettings(), own_redis_url, Resender("chalk"))
    try:
        for record in (
            b"[" * 100_000,  # nested too deeply for the JSON reader
            b'{"id": "j", "judge": {"type": "regex", "patterns": [{"pattern": "a", '
            b'"flags": 1099511627776}]}}',  # flags too large for re
        ):
            start = Start(StartOutcome.START, attempts=1, record=record)
            result = asyncio.run(runtime._score("j", start, "worker"))
            assert result.status is JobStatus.FAILED, result
            assert "record in Redis" in (result.error or "")
    finally:
        runtime.close()
