"""``ChalkClient`` and ``AsyncChalkClient`` against a real redis-server and real workers."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
import uuid
from collections import Counter

import pytest
import redis
from support import say

from chalk_client import (
    AsyncChalkClient,
    ChalkClient,
    ChalkSettings,
    InvalidJobError,
    JobStatus,
    ResultTimeout,
    ScoringJob,
    Submission,
)
from chalk_client.cluster.lanes import waiting_messages
from chalk_client.errors import NoLiveWorkerError
from chalk_client.judges import AlwaysPassJudge, CustomJudge, RegexJudge


def idle_client(make_client, redis_url: str) -> tuple[ChalkClient, str]:  # type: ignore[no-untyped-def]
    """A client whose queue no worker consumes, and that queue's name."""
    queue = f"idle-{uuid.uuid4().hex[:8]}"
    return make_client(redis_url, settings=ChalkSettings(queue=queue)), queue


def logged(scorings, key: str, **params) -> CustomJudge:
    return CustomJudge("test_log", {"log": scorings.path, "key": key, **params})


def ends(scorings) -> Counter[str]:
    return Counter(key for event, key, _ in scorings() if event == "end")


def test_submit_and_wait_returns_the_workers_result(client):
    result = client.submit_and_wait(
        ScoringJob(id="one", transcript=say("answer: 42"), judge=RegexJudge(["answer: 42"])),
        timeout=30,
    )
    assert result.job_id == "one"
    assert result.status is JobStatus.SUCCEEDED
    assert result.score == 1.0
    assert result.attempts == 1
    assert result.worker and "@" in result.worker
    assert client.get("one") == result
    assert client.get("never-submitted") is None


def test_the_same_id_twice_is_scored_once(client, scorings):
    job = ScoringJob(id="twice", judge=logged(scorings, "twice"))
    first = client.submit_and_wait(job, timeout=30)
    second = client.submit_and_wait(job, timeout=30)
    assert first == second
    assert ends(scorings) == {"twice": 1}


def test_concurrent_submissions_of_one_id_share_one_scoring(client, scorings):
    job = ScoringJob(id="racing", judge=logged(scorings, "racing", sleep_s=0.3))
    results = []

    def submit() -> None:
        results.append(client.submit_and_wait(job, timeout=30))

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8
    assert all(result == results[0] for result in results)
    assert results[0].attempts == 1
    assert ends(scorings) == {"racing": 1}


def test_a_redelivered_message_does_not_score_again(client, redis_url, scorings):
    job = ScoringJob(id="again", judge=logged(scorings, "again"))
    first = client.submit_and_wait(job, timeout=30)
    from chalk_client.cluster.messages import redis_message

    redis.Redis.from_url(redis_url).lpush("chalk", redis_message("again", "chalk"))
    time.sleep(1.0)
    assert client.get("again") == first
    assert ends(scorings) == {"again": 1}


@pytest.mark.slow
def test_a_batch_of_1000_comes_back_in_job_order(client):
    jobs = [
        ScoringJob(
            id=f"job-{i:04d}",
            transcript=say("yes" if i % 3 else "no"),
            judge=RegexJudge(["yes"]),
            metadata={"i": i},
        )
        for i in range(1000)
    ]
    started = time.monotonic()
    batch = client.submit_batch(jobs)
    submitted = time.monotonic() - started
    seen: list[tuple[int, int]] = []
    results = batch.wait(timeout=120, progress=lambda done, total: seen.append((done, total)))
    assert submitted < 5, f"submitting 1000 jobs took {submitted:.2f} s"
    assert [r.job_id for r in results] == [job.id for job in jobs]
    assert [r.metadata["i"] for r in results] == list(range(1000))
    assert [r.score for r in results] == [0.0 if i % 3 == 0 else 1.0 for i in range(1000)]
    assert seen[-1] == (1000, 1000)
    summary = batch.summary()
    assert (summary.total, summary.succeeded, summary.failed, summary.queued) == (1000, 1000, 0, 0)
    assert summary.mean_score == pytest.approx(666 / 1000)


def test_batch_iterates_results_as_they_finish(client, scorings):
    slow = ScoringJob(id="slow", judge=logged(scorings, "slow", sleep_s=1.0))
    fast = [ScoringJob(id=f"fast-{i}", judge=AlwaysPassJudge()) for i in range(5)]
    batch = client.submit_batch([slow, *fast, fast[0]])
    order = [result.job_id for result in batch]
    assert sorted(order) == sorted(["slow", *(job.id for job in fast)])
    assert order[-1] == "slow"
    assert len(batch) == 7 and batch.total == 6
    assert [r.job_id for r in batch.results()] == ["slow", *(j.id for j in fast), "fast-0"]
    assert list(batch) == list(batch)  # a second pass yields the same results at once


def test_an_invalid_job_is_refused_and_nothing_is_sent(client, redis_url):
    with pytest.raises(InvalidJobError, match="judge"):
        client.submit({"id": "bad", "judge": {"type": "no-such-judge"}})
    with pytest.raises(InvalidJobError, match="steps"):
        client.submit_batch([{"id": "ok", "judge": {"type": "always_pass"}}, {"id": "bad"}])
    assert redis.Redis.from_url(redis_url).keys("chalk:job:*") == []


def test_a_timeout_raises_and_names_the_job(redis_url, make_client):
    idle, _ = idle_client(make_client, redis_url)
    with pytest.raises(ResultTimeout, match="waits-forever") as caught:
        idle.submit_and_wait(ScoringJob(id="waits-forever", judge=AlwaysPassJudge()), timeout=0.3)
    assert "queued" in str(caught.value)
    batch = idle.submit_batch(
        [ScoringJob(id=f"never-{i}", judge=AlwaysPassJudge()) for i in range(3)]
    )
    with pytest.raises(ResultTimeout, match="3 of 3 jobs"):
        batch.wait(timeout=0.2)
    assert batch.summary().queued == 3


def test_messages_carry_only_the_job_id_and_submissions_are_stored_once(redis_url, make_client):
    idle, queue = idle_client(make_client, redis_url)
    submission = Submission.from_files({"big.txt": "x" * 200_000})
    jobs = [
        ScoringJob(id=f"shared-{i}", submission=submission, judge=AlwaysPassJudge())
        for i in range(5)
    ]
    idle.submit_batch(jobs)
    store = redis.Redis.from_url(redis_url)
    messages = [json.loads(raw) for raw in waiting_messages(store, queue)]
    assert len(messages) == 5 and store.llen(queue) == 5  # a token per message
    for message in messages:
        assert len(json.dumps(message)) < 2000
        args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
        assert kwargs == {} and len(args) == 1 and args[0].startswith("shared-")
        assert message["headers"]["task"] == "chalk.score"
    assert store.keys("chalk:blob:*") == [f"chalk:blob:{submission.digest()}".encode()]
    assert 0 < store.ttl(f"chalk:blob:{submission.digest()}") <= 7 * 86400


def test_retry_failed_scores_a_failed_job_again(client):
    job = ScoringJob(id="broken", judge=CustomJudge("not_registered_anywhere"))
    first = client.submit_and_wait(job, timeout=30)
    assert first.status is JobStatus.FAILED and "not_registered_anywhere" in (first.error or "")
    assert client.submit_and_wait(job, timeout=30) == first
    again = client.submit_and_wait(job, timeout=30, retry_failed=True)
    assert again.status is JobStatus.FAILED and again.attempts == 2


def test_handles_and_batches_can_be_found_again(client):
    handle = client.submit(ScoringJob(id="later", judge=AlwaysPassJudge()))
    batch = client.submit_batch(
        [ScoringJob(id=f"b-{i}", judge=AlwaysPassJudge()) for i in range(3)]
    )
    assert client.job("later").wait(30) == handle.wait(30)
    again = client.batch(batch.id)
    assert [r.job_id for r in again.results(timeout=30)] == ["b-0", "b-1", "b-2"]
    assert handle.status() is JobStatus.SUCCEEDED


def test_the_async_client_has_the_same_verbs(redis_url, shared_worker):
    async def main() -> None:
        async with AsyncChalkClient(redis_url) as chalk:
            result = await chalk.submit_and_wait(
                ScoringJob(id="async-1", judge=AlwaysPassJudge()), timeout=30
            )
            assert result.status is JobStatus.SUCCEEDED
            batch = await chalk.submit_batch(
                [ScoringJob(id=f"async-b{i}", judge=AlwaysPassJudge()) for i in range(20)]
            )
            seen = [r.job_id async for r in batch]
            assert sorted(seen) == sorted(f"async-b{i}" for i in range(20))
            results = await batch.results()
            assert [r.job_id for r in results] == [f"async-b{i}" for i in range(20)]
            assert (await batch.summary()).succeeded == 20
            assert await chalk.get("async-1") == result
            with pytest.raises(InvalidJobError):
                await chalk.submit({"judge": {"type": "nope"}})

    asyncio.run(main())


def test_the_message_the_client_writes_is_the_one_celery_would_send(own_redis_url):
    from celery import Celery

    from chalk_client.cluster.messages import redis_message

    celery = Celery("capture", broker=own_redis_url, set_as_current=False)
    celery.conf.task_serializer = "json"
    celery.send_task("chalk.score", args=["job-1"], queue="captured")
    store = redis.Redis.from_url(own_redis_url)
    theirs = json.loads(store.lrange("captured", 0, -1)[0])
    ours = json.loads(redis_message("job-1", "captured"))
    assert set(ours) == set(theirs)
    assert set(ours["headers"]) == set(theirs["headers"])
    assert set(ours["properties"]) == set(theirs["properties"])
    assert ours["properties"]["delivery_info"] == theirs["properties"]["delivery_info"]
    for key in ("content-type", "content-encoding"):
        assert ours[key] == theirs[key]
    assert base64.b64decode(ours["body"]) == base64.b64decode(theirs["body"])
    assert ours["headers"]["task"] == theirs["headers"]["task"] == "chalk.score"
    assert ours["headers"]["argsrepr"] == theirs["headers"]["argsrepr"]


def test_a_program_can_wait_for_the_workers_to_be_ready(own_redis_url, start_worker, make_client):
    client = make_client(own_redis_url)
    assert client.workers() == []
    started = time.monotonic()
    with pytest.raises(NoLiveWorkerError) as refused:
        client.wait_for_workers(timeout=0.5)
    assert 0.5 <= time.monotonic() - started < 3
    assert "0 of the 1 live worker(s) asked for after 0.5 s" in str(refused.value)
    assert "`chalk worker`" in str(refused.value)
    worker = start_worker(own_redis_url, wait=False, env={"CHALK_RUBRIC_MODEL": "m-1"})
    (ready,) = client.wait_for_workers(timeout=60)
    assert ready.node.startswith(worker.name + "@") and ready.queue == "chalk"
    assert ready.llm_model == "m-1" and ready.sandbox  # what chalk health shows of it
    # Ready means taking jobs: a job sent now is scored.
    assert client.submit_and_wait(ScoringJob(judge=AlwaysPassJudge()), timeout=30).score == 1


def test_both_clients_have_the_same_verbs_and_reprs():
    import inspect

    from chalk_client import AsyncBatch, AsyncJobHandle, Batch, JobHandle

    for sync, asyncio_twin in (
        (ChalkClient, AsyncChalkClient),
        (Batch, AsyncBatch),
        (JobHandle, AsyncJobHandle),
    ):
        public = {n for n in dir(sync) if not n.startswith("_") or n == "__repr__"}
        twin = {n.replace("aiter", "iter") for n in dir(asyncio_twin)}
        assert public <= twin, public - twin
        for name in public:
            mine, theirs = getattr(sync, name), getattr(asyncio_twin, name)
            if callable(mine) and not isinstance(mine, type):
                assert inspect.signature(mine).parameters.keys() == (
                    inspect.signature(theirs).parameters.keys()
                ), name
