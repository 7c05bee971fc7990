"""Redis out of memory (over ``maxmemory``, ``noeviction``) delays jobs and loses none.

Such a Redis refuses writes. A worker then waits, saying in its log what is
wrong and what to do, and takes every job up again once memory is freed. A Lua
script Redis refused has changed nothing, so a job whose start was refused
counts one attempt, and is scored once.

Each test has a redis-server of its own: filling it would disturb any other test.
"""

from __future__ import annotations

import base64
import json
import logging
import shutil
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from processes import free_port, need, start_redis, stop

from chalk_client import ChalkClient, ChalkSettings, JobStatus, ScoringJob, keys
from chalk_client.broker import redis_message
from chalk_client.jobs import JobResult
from chalk_client.judges import AlwaysPassJudge, CustomJudge
from chalk_worker.consume import WorkerRuntime
from chalk_worker.leases import LeaseStore

FULL = 1
"""A ``maxmemory`` in bytes that any Redis is over."""


@pytest.fixture
def full_redis(tmp_path: Path) -> Iterator[tuple[str, redis.Redis]]:
    """A redis-server of this test's own that refuses writes when full, and a client of it."""
    if shutil.which("redis-server") is None:
        need("redis-server")
    port = free_port()
    proc = start_redis(port, tmp_path)
    store = redis.Redis.from_url(f"redis://127.0.0.1:{port}/0")
    store.config_set("maxmemory-policy", "noeviction")
    yield f"redis://127.0.0.1:{port}/0", store
    store.close()
    stop(proc)


def job_of(message: bytes) -> str:
    """The job id a ``chalk.score`` message in a queue carries."""
    body = json.loads(base64.b64decode(json.loads(message)["body"]))
    return str(body[0][0])


def test_a_full_redis_delays_jobs_and_loses_none(full_redis, start_worker, scorings):
    url, store = full_redis
    worker = start_worker(url, concurrency=2)
    # Recorded and queued on a queue no worker reads, to hand the worker at the right moment.
    parked = ChalkClient(url, settings=ChalkSettings(queue="parked"))
    handles = {
        key: parked.submit(
            ScoringJob(id=key, judge=CustomJudge("test_log", {"log": scorings.path, "key": key}))
        )
        for key in ("start-refused", "taken-while-full")
    }
    # The first job's message made due in two seconds: the worker takes it now
    # (Redis records it as unacknowledged) and starts the job once Redis is full.
    message = store.rpop("parked")
    assert job_of(message) == "start-refused"
    raw = json.loads(message)
    raw["headers"]["eta"] = (datetime.now(UTC) + timedelta(seconds=2)).isoformat()
    store.lpush("chalk", json.dumps(raw))
    worker.wait_for(f"Task chalk.score[{raw['headers']['id']}] received")
    store.config_set("maxmemory", FULL)

    worker.wait_for("is out of memory (maxmemory) while starting job start-refused: free memory")
    # A message taken from the queue while Redis is full: kombu cannot record it as
    # unacknowledged, and until it can, the message lives only in the worker.
    store.rename("parked", "chalk")  # RENAME is not refused: it needs no memory
    worker.wait_for("is out of memory (maxmemory) while recording a message taken from the queue")
    assert store.get(keys.attempts("start-refused")) is None  # the refused start changed nothing
    assert store.llen("chalk") == 0

    store.config_set("maxmemory", 0)
    for key, handle in handles.items():
        result = handle.wait(30)
        assert (result.status, result.attempts) == (JobStatus.SUCCEEDED, 1), key
    assert Counter(key for event, key, _ in scorings() if event == "end") == {
        "start-refused": 1,
        "taken-while-full": 1,
    }
    assert worker.proc.poll() is None  # the same worker process throughout
    log = worker.text()
    assert "Unrecoverable error" not in log and "Connection to broker lost" not in log
    assert "dropped an entry" not in log  # a pop that timed out is no entry to drop
    deadline = time.monotonic() + 10
    while store.hlen("unacked"):  # both messages acknowledged
        assert time.monotonic() < deadline, store.hgetall("unacked")
        time.sleep(0.05)


def test_refused_scripts_change_nothing_and_are_retried(full_redis, caplog):
    url, store = full_redis
    settings = ChalkSettings(lease_s=60)
    leases = LeaseStore(redis.Redis.from_url(url), settings)
    job = ScoringJob(id="j", judge=AlwaysPassJudge())
    store.hset(keys.job("j"), mapping={"job": job.model_dump_json(), "blob": ""})
    store.set(keys.owner("held"), "another worker")
    result = JobResult(job_id="held", status=JobStatus.SUCCEEDED)
    before = set(store.keys())

    store.config_set("maxmemory", FULL)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        leases.start("j", "me")
    with pytest.raises(redis.exceptions.OutOfMemoryError):  # its first write is the result
        leases.finish(result, "me")
    assert set(store.keys()) == before  # no lease, attempt or result: nothing happened

    runtime = WorkerRuntime(settings, url, requeue=lambda job_ids: None)
    try:
        caplog.set_level(logging.WARNING, logger="chalk_worker.consume")
        threading.Timer(1.5, store.config_set, ("maxmemory", 0)).start()
        started = time.monotonic()
        start = runtime.retrying("starting job j", lambda: leases.start("j", runtime.owner))
        assert start.outcome == "start" and start.attempts == 1
        assert runtime.retrying("storing held", lambda: leases.finish(result, runtime.owner))
        assert time.monotonic() - started < 5
    finally:
        runtime.keeper.stopped.set()
    said = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    assert said and all("is out of memory (maxmemory) while starting job j" in s for s in said)
    assert "raise maxmemory" in said[0]
    with pytest.raises(redis.ResponseError):  # any other error is not retried
        runtime.retrying("asking", lambda: store.execute_command("NO-SUCH-COMMAND"))


def test_jobs_reaped_while_redis_is_full_are_enqueued_once_it_is_not(full_redis):
    url, store = full_redis
    settings = ChalkSettings(lease_s=0.2)
    sent: list[str] = []

    def requeue(job_ids: list[str]) -> None:
        store.rpush("chalk", *[redis_message(job_id, "chalk") for job_id in job_ids])
        sent.extend(job_ids)

    store.zadd(keys.RUNNING, {"orphan": 0})  # the lease of a worker that died
    store.set(keys.owner("orphan"), "a dead worker")
    store.config_set("maxmemory", FULL)
    runtime = WorkerRuntime(settings, url, requeue)
    try:
        deadline = time.monotonic() + 5
        while store.zscore(keys.RUNNING, "orphan") is not None:  # reaped, not enqueued
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.5)
        assert sent == [] and store.llen("chalk") == 0
        store.config_set("maxmemory", 0)
        while not sent:
            assert time.monotonic() < deadline, "the reaped job was never enqueued"
            time.sleep(0.05)
        time.sleep(0.5)
    finally:
        runtime.keeper.stopped.set()
    assert sent == ["orphan"]
    assert [job_of(m) for m in store.lrange("chalk", 0, -1)] == ["orphan"]


def test_leases_are_renewed_while_redis_is_full(full_redis):
    # Otherwise an idle worker would reap a running job once its lease ran out and it
    # would be scored a second time after memory comes back.
    url, store = full_redis
    leases = LeaseStore(redis.Redis.from_url(url), ChalkSettings(lease_s=60))
    store.hset(
        keys.job("j"),
        mapping={"job": ScoringJob(id="j", judge=AlwaysPassJudge()).model_dump_json(), "blob": ""},
    )
    assert leases.start("j", "me").outcome == "start"
    before = store.zscore(keys.RUNNING, "j")
    assert before is not None
    store.zadd(keys.RUNNING, {"j": before - 30_000})  # as if half the lease had passed
    store.config_set("maxmemory", FULL)
    assert leases.heartbeat(["j"], "me") == []  # renewed, not refused
    renewed = store.zscore(keys.RUNNING, "j")
    assert renewed is not None and renewed > before - 1_000
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        store.set("anything", "else")  # Redis is full indeed
    assert leases.heartbeat(["j"], "someone else") == ["j"]  # and still says who lost one
    assert leases.reap() == []


def test_every_job_reaped_while_redis_is_full_is_enqueued_later(full_redis):
    # Two dead workers' jobs, reaped at different ticks while Redis is full: neither is lost.
    url, store = full_redis
    sent: list[str] = []

    def requeue(job_ids: list[str]) -> None:
        store.rpush("chalk", *[redis_message(job_id, "chalk") for job_id in job_ids])
        sent.extend(job_ids)

    now_ms = time.time() * 1000
    store.zadd(keys.RUNNING, {"orphan-a": 0, "orphan-b": now_ms + 1500})
    store.set(keys.owner("orphan-a"), "a dead worker")
    store.set(keys.owner("orphan-b"), "another dead worker")
    store.config_set("maxmemory", FULL)
    runtime = WorkerRuntime(ChalkSettings(lease_s=0.2), url, requeue)
    try:
        deadline = time.monotonic() + 10
        while store.zcard(keys.RUNNING):  # both reaped while full, at different ticks
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.3)
        store.config_set("maxmemory", 0)
        while len(sent) < 2:
            assert time.monotonic() < deadline, f"enqueued only {sent}"
            time.sleep(0.05)
        time.sleep(0.3)
    finally:
        runtime.keeper.stopped.set()
    assert sorted(sent) == ["orphan-a", "orphan-b"]
    assert sorted(job_of(m) for m in store.lrange("chalk", 0, -1)) == ["orphan-a", "orphan-b"]
