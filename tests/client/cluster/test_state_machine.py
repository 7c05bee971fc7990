"""The job state machine, driven through ``chalk_client.cluster`` alone (no Celery, no worker).

Each case runs twice: against a real ``redis-server`` and against ``fakeredis`` with
Lua, the fast tier (``pytest tests/client/cluster/test_state_machine.py -k fakeredis`` needs
no server). A full Redis (``maxmemory``) is a real server's behaviour: that case runs
against a server of its own.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis
from processes import free_port, need, start_redis, stop
from queueing import take_raw

from chalk_client import ChalkSettings, JobStatus, Message, ScoringJob, Submission, Transcript
from chalk_client.cluster import keys
from chalk_client.cluster.finish import queue_finish
from chalk_client.cluster.lanes import lane_for
from chalk_client.cluster.leases import (
    Start,
    parse_expired,
    parse_start,
    queue_heartbeat,
    queue_reap,
    queue_requeue,
    queue_start,
)
from chalk_client.cluster.messages import queue_message
from chalk_client.cluster.purge import queue_purge
from chalk_client.cluster.script import Pipeline, as_text, run_pipeline
from chalk_client.cluster.submit import queue_submit, queue_submit_chunk
from chalk_client.cluster.watch import parse_states, queue_states
from chalk_client.judges import AlwaysPassJudge
from chalk_client.records import PreparedJob, load_job, prepare_job

SETTINGS = ChalkSettings()
QUEUE = SETTINGS.queue


@pytest.fixture(params=["redis-server", "fakeredis"])
def store(request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    """An empty Redis: a database of the session's server, or an in-process fake."""
    if request.param == "fakeredis":
        client: redis.Redis = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    else:
        client = redis.Redis.from_url(request.getfixturevalue("own_redis_url"))
    yield client
    client.close()


def one(store: redis.Redis, build: Any) -> Any:
    """The reply of the one command ``build`` queues; a per-command error is raised."""
    reply = run_pipeline(store, build)[0]
    if isinstance(reply, Exception):
        raise reply
    return reply


def submit(
    store: redis.Redis,
    job: PreparedJob,
    waiter: str = "waiter-a",
    *,
    retry_failed: bool = False,
) -> str:
    """Submit ``job`` as a Redis-broker client does (its message pushed by the script)."""
    message = queue_message(job.job_id, QUEUE)
    blobs = {job.digest: job.archive} if job.archive is not None else {}

    def build(pipe: Pipeline) -> None:
        for digest, archive in blobs.items():
            pipe.set(keys.blob(digest), archive, ex=SETTINGS.blob_ttl_s)
        queue_submit(
            pipe,
            job,
            SETTINGS,
            waiter=waiter,
            message=(message.text, message.task_id),
            retry_failed=retry_failed,
        )

    replies = run_pipeline(store, build)
    return as_text(replies[-1])


def start(store: redis.Redis, job_id: str, owner: str, lease_ms: int = 60_000) -> Start:
    return parse_start(
        one(store, lambda pipe: queue_start(pipe, job_id, owner, lease_ms=lease_ms, node=owner))
    )


def finish(store: redis.Redis, job_id: str, owner: str, status: str = "succeeded") -> int:
    result = f'{{"job_id": "{job_id}", "status": "{status}", "by": "{owner}"}}'
    return int(
        one(
            store,
            lambda pipe: queue_finish(
                pipe, job_id, result, owner, status=JobStatus(status), ttl_s=SETTINGS.result_ttl_s
            ),
        )
    )


def requeue(store: redis.Redis, job_id: str) -> str:
    message = queue_message(job_id, QUEUE)
    reply = one(
        store,
        lambda pipe: queue_requeue(
            pipe, job_id, message.text, message.task_id, token="", lease_ms=0, queue=QUEUE
        ),
    )
    return str(reply.decode())


def state(store: redis.Redis, job_id: str) -> Any:
    return parse_states(run_pipeline(store, lambda pipe: queue_states(pipe, [job_id])))[0]


def done_list(store: redis.Redis, waiter: str) -> list[str]:
    return [item.decode() for item in store.lrange(keys.done(waiter), 0, -1)]


def job(job_id: str, files: dict[str, str] | None = None) -> PreparedJob:
    submission = Submission.from_files(files) if files else None
    return prepare_job(ScoringJob(id=job_id, judge=AlwaysPassJudge(), submission=submission))


def test_submitting_twice_queues_one_message_and_tells_both_waiters(store):
    assert submit(store, job("j1")) == "queued"
    assert submit(store, job("j1")) == "duplicate"  # the same client again
    assert submit(store, job("j1"), waiter="waiter-b") == "duplicate"
    assert store.llen(QUEUE) == 1
    assert (state(store, "j1").recorded, state(store, "j1").attempts) == (True, 0)

    assert start(store, "j1", "worker-1").outcome == "start"
    assert finish(store, "j1", "worker-1") == 1
    assert done_list(store, "waiter-a") == ["j1"]
    assert done_list(store, "waiter-b") == ["j1"]
    assert submit(store, job("j1"), waiter="waiter-c") == "done"  # its result stands
    assert store.llen(QUEUE) == 1


def test_a_held_lease_refuses_a_second_start_until_the_job_is_done(store):
    submit(store, job("j1"))
    first = start(store, "j1", "worker-1")
    assert (first.outcome, first.attempts, first.blob) == ("start", 1, "none")
    assert ScoringJob.model_validate_json(first.record).id == "j1"
    second = start(store, "j1", "worker-2")
    assert (second.outcome, second.holder) == ("busy", "worker-1")
    assert state(store, "j1").running

    finish(store, "j1", "worker-1")
    assert start(store, "j1", "worker-2").outcome == "done"
    assert start(store, "never-submitted", "worker-2").outcome == "missing"
    now = state(store, "j1")
    assert (now.finished, now.running) == (True, False)


def test_an_expired_lease_is_reaped_and_sent_again_once(store):
    submit(store, job("j1"))
    taken = take_raw(store, QUEUE, f"{QUEUE}@worker-1:host:1:t:1")
    assert taken is not None  # worker-1 takes the message, starts, and dies
    start(store, "j1", "worker-1", lease_ms=1)
    time.sleep(0.02)
    expired = parse_expired(one(store, queue_reap))
    assert [(lease.job_id, lease.node, lease.queue) for lease in expired] == [
        ("j1", "worker-1", lane_for(QUEUE, "normal", None))
    ]

    assert requeue(store, "j1") == "requeued"
    assert requeue(store, "j1") == "gone"  # a second reaper finds nothing to send
    assert store.llen(QUEUE) == 1
    assert parse_expired(one(store, queue_reap)) == []

    again = start(store, "j1", "worker-2")
    assert (again.outcome, again.attempts) == ("start", 2)
    assert finish(store, "j1", "worker-2") == 1
    assert finish(store, "j1", "worker-1") == 0  # the dead worker's late finish: no effect
    assert b'"by": "worker-2"' in store.get(keys.result("j1"))


def test_a_long_record_is_stored_compressed_and_read_back_whole(store):
    said = Transcript(messages=[Message(role="assistant", content="step done. " * 2000)])
    long = prepare_job(ScoringJob(id="long", transcript=said, judge=AlwaysPassJudge()))
    submit(store, long)
    stored = store.hget(keys.job("long"), "job")
    assert stored is not None and len(stored) < len(said.model_dump_json()) // 4
    started = start(store, "long", "worker-1")
    assert load_job(started.record, started.archive).transcript == said
    assert isinstance(job("short").record, str)  # a short record stays plain JSON


def test_a_renewed_lease_is_left_alone(store):
    submit(store, job("j1"))
    start(store, "j1", "worker-1", lease_ms=1)
    time.sleep(0.02)
    lost = one(store, lambda pipe: queue_heartbeat(pipe, ["j1"], "worker-1", 60_000))
    assert lost == []
    assert requeue(store, "j1") == "alive"
    assert start(store, "j1", "worker-2").outcome == "busy"


def test_finishing_twice_keeps_the_first_result(store):
    submit(store, job("j1"))
    start(store, "j1", "worker-1")
    assert finish(store, "j1", "worker-1") == 1
    assert finish(store, "j1", "worker-1", status="failed") == 0
    assert b'"status": "succeeded"' in store.get(keys.result("j1"))
    assert done_list(store, "waiter-a") == ["j1"]  # told once


def test_a_job_that_succeeded_leaves_its_result_and_frees_a_shared_archive_last(store):
    shared = {"solution.py": "print(1)\n"}
    first, second = job("j1", shared), job("j2", shared)
    assert first.digest == second.digest
    submit(store, first)
    submit(store, second)
    assert store.exists(keys.blob(first.digest))
    consumer = f"{QUEUE}@worker-1:host:1:t:1"
    for job_id in ("j1", "j2"):
        assert take_raw(store, QUEUE, consumer) is not None
        store.delete(keys.held(consumer))  # acknowledged
        started = start(store, job_id, "worker-1")
        assert (started.blob, started.archive) == ("ok", first.archive)

    finish(store, "j1", "worker-1")
    assert not store.exists(keys.job("j1"))
    assert store.exists(keys.blob(first.digest))  # j2 still needs it
    finish(store, "j2", "worker-1")
    assert not store.exists(keys.blob(first.digest), keys.blobref(first.digest))
    assert {key.decode() for key in store.scan_iter("chalk:*")} <= {
        keys.result("j1"),
        keys.result("j2"),
        keys.done("waiter-a"),
        keys.PUSHES,
    }


def test_a_failed_job_is_kept_and_scored_again_only_when_asked(store):
    submit(store, job("j1"))
    start(store, "j1", "worker-1")
    finish(store, "j1", "worker-1", status="failed")
    assert store.hget(keys.job("j1"), "status") == b"failed"
    assert submit(store, job("j1")) == "done"
    assert store.llen(QUEUE) == 1  # only the first message

    assert submit(store, job("j1"), waiter="waiter-b", retry_failed=True) == "requeued"
    assert not store.exists(keys.result("j1"))
    assert store.llen(QUEUE) == 2
    again = start(store, "j1", "worker-2")
    assert (again.outcome, again.attempts) == ("start", 2)  # attempts go on counting
    finish(store, "j1", "worker-2")
    assert done_list(store, "waiter-a") == ["j1", "j1"]  # the first submitter hears again
    assert done_list(store, "waiter-b") == ["j1"]


def test_purge_fails_a_waiting_job_but_not_a_running_one(store):
    submit(store, job("waiting"))
    submit(store, job("running"))
    start(store, "running", "worker-1")
    failed = '{"status": "failed", "error": "purged"}'

    def purge(pipe: Pipeline) -> None:
        for job_id in ("waiting", "running", "never"):
            queue_purge(pipe, job_id, failed, SETTINGS.result_ttl_s)

    replies = run_pipeline(store, purge)
    assert [as_text(reply) for reply in replies] == ["purged", "running", "missing"]
    assert start(store, "waiting", "worker-2").outcome == "done"
    assert done_list(store, "waiter-a") == ["waiting"]


def test_scripts_forgotten_by_redis_are_loaded_again(store):
    submit(store, job("j1"))
    store.script_flush()
    assert start(store, "j1", "worker-1").outcome == "start"


@pytest.fixture
def full_store(tmp_path: Path) -> Iterator[redis.Redis]:
    """A redis-server of this test's own, that refuses writes when over ``maxmemory``."""
    if shutil.which("redis-server") is None:
        need("redis-server")
    port = free_port()
    proc = start_redis(port, tmp_path)
    client = redis.Redis(port=port)
    client.config_set("maxmemory-policy", "noeviction")
    yield client
    client.close()
    stop(proc)


def test_a_full_redis_refuses_submits_and_starts_whole_and_lets_running_jobs_finish(
    full_store,
):
    submit(full_store, job("running"))
    submit(full_store, job("queued"))
    start(full_store, "running", "worker-1")
    before = {key: full_store.type(key) for key in full_store.scan_iter("chalk:*")}
    queue_length = full_store.llen(QUEUE)
    full_store.config_set("maxmemory", 1)

    chunk = [job("new", {"a.txt": "a"})]
    replies = run_pipeline(
        full_store,
        lambda pipe: queue_submit_chunk(
            pipe,
            chunk,
            {chunk[0].digest: chunk[0].archive or b""},
            SETTINGS,
            "waiter-a",
            lambda job_id: queue_message(job_id, QUEUE),
            retry_failed=False,
        ),
    )
    assert all(isinstance(reply, redis.exceptions.OutOfMemoryError) for reply in replies)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        start(full_store, "queued", "worker-2")
    assert full_store.hget(keys.job("queued"), "attempts") == b"0"  # nothing changed
    assert {key: full_store.type(key) for key in full_store.scan_iter("chalk:*")} == before
    assert full_store.llen(QUEUE) == queue_length

    # What frees memory or moves deadlines goes through: renewals and the running job's end.
    renew = one(full_store, lambda pipe: queue_heartbeat(pipe, ["running"], "worker-1", 60_000))
    assert renew == []
    assert finish(full_store, "running", "worker-1") == 1
    assert not full_store.exists(keys.job("running"))

    full_store.config_set("maxmemory", 0)
    assert start(full_store, "queued", "worker-2").attempts == 1
