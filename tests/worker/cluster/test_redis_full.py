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
from queueing import drop_waiting, pop_waiting, rename_waiting, waiting_messages
from support import held_count

from chalk_client import ChalkClient, ChalkSettings, JobStatus, ScoringJob
from chalk_client.cluster import keys
from chalk_client.jobs import JobResult
from chalk_client.judges import AlwaysPassJudge, CustomJudge
from chalk_worker.cluster.consume import WorkerRuntime
from chalk_worker.cluster.keeper import Resender
from chalk_worker.cluster.leases import LeaseStore

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
    # Celery's "received" line tells when the worker took the message.
    worker = start_worker(url, concurrency=2, env={"CHALK_WORKER_LOG_TASKS": "true"})
    # Recorded and queued on a queue no worker reads, to hand the worker at the right moment.
    parked = ChalkClient(url, settings=ChalkSettings(queue="parked"))
    handles = {
        key: parked.submit(
            ScoringJob(id=key, judge=CustomJudge("test_log", {"log": scorings.path, "key": key}))
        )
        for key in ("start-refused", "taken-while-full")
    }
    # The first job's message made due in two seconds: the worker takes it now
    # (into its held list in Redis) and starts the job once Redis is full.
    message = pop_waiting(store, "parked")
    assert job_of(message) == "start-refused"
    raw = json.loads(message)
    raw["headers"]["eta"] = (datetime.now(UTC) + timedelta(seconds=2)).isoformat()
    store.lpush("chalk", json.dumps(raw))
    worker.wait_for(f"Task chalk.score[{raw['headers']['id']}] received")
    store.config_set("maxmemory", FULL)

    worker.wait_for("is out of memory (maxmemory) while starting job start-refused: free memory")
    # A message waiting while Redis is full: the worker takes nothing until Redis has room
    # (taking it is a write), or, if Redis hands it over, waits to note it was taken.
    rename_waiting(store, "parked", "chalk")  # RENAME is not refused: it needs no memory
    deadline = time.monotonic() + 30
    while not any(
        f"is out of memory (maxmemory) while {doing}" in worker.text()
        for doing in ("taking a message from the queue", "noting a message taken")
    ):
        assert worker.proc.poll() is None and time.monotonic() < deadline, worker.text()[-3000:]
        time.sleep(0.05)
    assert (
        store.hget(keys.job("start-refused"), "attempts") == b"0"
    )  # the refused start changed nothing
    assert store.llen("chalk") + held_count(store) == 2  # every message is in Redis

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
    while held_count(store):  # both messages acknowledged
        assert time.monotonic() < deadline, held_count(store)
        time.sleep(0.05)
    parked.close()


def test_refused_scripts_change_nothing_and_are_retried(full_redis, caplog):
    url, store = full_redis
    settings = ChalkSettings(lease_s=60)
    leases = LeaseStore(store, settings)
    job = ScoringJob(id="j", judge=AlwaysPassJudge())
    store.hset(keys.job("j"), mapping={"job": job.model_dump_json(), "blob": ""})
    store.hset(keys.job("held"), "owner", "another worker")
    result = JobResult(job_id="held", status=JobStatus.SUCCEEDED)
    before = set(store.keys())
    record = store.hgetall(keys.job("j"))

    store.config_set("maxmemory", FULL)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        leases.start("j", "me")
    assert set(store.keys()) == before  # no lease, attempt or result: nothing happened
    assert store.hgetall(keys.job("j")) == record

    runtime = WorkerRuntime(settings, url, Resender("chalk"))
    try:
        caplog.set_level(logging.WARNING, logger="chalk_worker.cluster.consume")
        threading.Timer(1.5, store.config_set, ("maxmemory", 0)).start()
        started = time.monotonic()
        start = runtime.retrying("starting job j", lambda: leases.start("j", runtime.owner))
        assert start.outcome == "start" and start.attempts == 1
        assert runtime.retrying("storing held", lambda: leases.finish(result, runtime.owner))
        assert time.monotonic() - started < 5
    finally:
        runtime.close()
    said = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    assert said and all("is out of memory (maxmemory) while starting job j" in s for s in said)
    assert "raise maxmemory" in said[0]
    with pytest.raises(redis.ResponseError):  # any other error is not retried
        runtime.retrying("asking", lambda: store.execute_command("NO-SUCH-COMMAND"))


def dead_workers_job(url: str, store: redis.Redis, job_id: str, deadline_ms: float) -> None:
    """A job recorded and started by a worker that died: its lease runs out at ``deadline_ms``."""
    with ChalkClient(url, settings=ChalkSettings(queue="parked")) as parked:
        parked.submit(ScoringJob(id=job_id, judge=AlwaysPassJudge()))
    drop_waiting(store, "parked")
    store.zadd(keys.RUNNING, {job_id: deadline_ms})
    store.hset(keys.job(job_id), "owner", "a dead worker")


def test_a_dead_worker_s_job_is_sent_again_while_redis_is_full(full_redis):
    # Sending it again frees memory-neutral state first, so a full Redis does not stop it.
    url, store = full_redis
    dead_workers_job(url, store, "orphan", 0)
    store.config_set("maxmemory", FULL)
    runtime = WorkerRuntime(ChalkSettings(lease_s=0.2), url, Resender("chalk"))
    try:
        deadline = time.monotonic() + 5
        while store.llen("parked") == 0:
            assert time.monotonic() < deadline, "the dead worker's job was never sent again"
            time.sleep(0.05)
        time.sleep(0.5)
    finally:
        runtime.close()
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        store.set("anything", "else")  # Redis was full throughout
    assert store.zcard(keys.RUNNING) == 0
    assert [job_of(m) for m in waiting_messages(store, "parked")] == ["orphan"]  # once


def test_leases_are_renewed_while_redis_is_full(full_redis):
    # Otherwise an idle worker would reap a running job once its lease ran out and it
    # would be scored a second time after memory comes back.
    _, store = full_redis
    leases = LeaseStore(store, ChalkSettings(lease_s=60))
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


def test_every_dead_worker_s_job_is_sent_again_while_redis_is_full(full_redis):
    # Two dead workers' jobs whose leases run out at different ticks: neither is lost.
    url, store = full_redis
    now_ms = time.time() * 1000
    dead_workers_job(url, store, "orphan-a", 0)
    dead_workers_job(url, store, "orphan-b", now_ms + 1500)
    store.config_set("maxmemory", FULL)
    runtime = WorkerRuntime(ChalkSettings(lease_s=0.2), url, Resender("chalk"))
    try:
        deadline = time.monotonic() + 10
        while store.llen("parked") < 2:
            assert time.monotonic() < deadline, waiting_messages(store, "parked")
            time.sleep(0.05)
        time.sleep(0.3)
    finally:
        runtime.close()
    assert store.zcard(keys.RUNNING) == 0
    assert sorted(job_of(m) for m in waiting_messages(store, "parked")) == ["orphan-a", "orphan-b"]
