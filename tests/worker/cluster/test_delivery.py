"""No message window: what a worker took is held in Redis, and the job record is the truth.

Real ``chalk worker`` processes and a real Redis: messages taken and not started
come back when their worker dies, jobs whose message was lost (a queue emptied
by hand, a message popped by something that died) are sent again by the
reconciler, and jobs that simply wait in a long queue are left alone.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter

import pytest
import redis
from processes import need, stop, wait_port
from queueing import drop_waiting, pop_waiting, waiting_messages
from support import held_count, wait_until

from chalk_client import ChalkClient, ChalkSettings, JobStatus, ScoringJob
from chalk_client.cluster import keys
from chalk_client.judges import AlwaysPassJudge, CustomJudge
from chalk_client.records import prepare_job


def job_of(message: bytes | str) -> str:
    return str(json.loads(base64.b64decode(json.loads(message)["body"]))[0][0])


def gated(prefix: str, count: int, log: str, gate: str) -> list[ScoringJob]:
    return [
        ScoringJob(
            id=f"{prefix}-{i:02d}",
            judge=CustomJudge("test_log", {"log": log, "key": f"{prefix}-{i:02d}", "gate": gate}),
        )
        for i in range(count)
    ]


@pytest.mark.slow
def test_messages_a_killed_worker_took_but_never_started_come_back_at_once(
    own_redis_url, start_worker, scorings, tmp_path
):
    url = own_redis_url
    gate = tmp_path / "gate"
    # Two jobs run (held at the gate); six more are taken and wait for a free thread.
    first = start_worker(url, concurrency=2, args=("--prefetch-multiplier", "4"))
    jobs = gated("t", 8, scorings.path, str(gate))
    batch = ChalkClient(url).submit_batch(jobs)
    store = redis.Redis.from_url(url)
    wait_until(lambda: held_count(store) == 8, 30, "eight messages taken")
    wait_until(lambda: len(scorings()) == 2, 30, "two jobs started")
    assert store.llen("chalk") == 0  # the other six are only in the worker's held list

    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait()
    killed = time.monotonic()
    gate.touch()
    second = start_worker(url, concurrency=8)
    results = batch.results(timeout=60)
    assert time.monotonic() - killed < 60  # not the visibility timeout (12 h)
    assert all(r.status is JobStatus.SUCCEEDED for r in results)
    assert Counter(key for event, key, _ in scorings() if event == "end") == {
        job.id: 1 for job in jobs
    }
    started_by_first = {key for event, key, pid in scorings() if pid == first.pid}
    for result in results:
        assert result.worker.startswith(second.name)
        assert result.attempts == (2 if result.job_id in started_by_first else 1)
    second.wait_for("whose worker stopped renewing it")
    wait_until(lambda: held_count(store) == 0, 10, "nothing left held")
    assert store.zcard(keys.CONSUMERS) == 1  # the dead worker's consumer is forgotten


@pytest.mark.slow
def test_a_queue_emptied_by_hand_is_filled_again_by_the_reconciler(own_redis_url, start_worker):
    url = own_redis_url
    client = ChalkClient(url)
    jobs = [ScoringJob(id=f"q-{i:02d}", judge=AlwaysPassJudge()) for i in range(20)]
    batch = client.submit_batch(jobs, batch_id="b-emptied")
    store = redis.Redis.from_url(url)
    assert store.llen("chalk") == 20
    drop_waiting(store, "chalk")  # an operator's mistake: the messages are gone, not the records
    worker = start_worker(url, env={"CHALK_RECONCILE_S": "1"})
    results = batch.results(timeout=60)
    assert [r.status for r in results] == [JobStatus.SUCCEEDED] * 20
    assert {r.attempts for r in results} == {1}
    worker.wait_for("the reconciler sent again")
    assert store.zcard(keys.PENDING) == 0  # finished jobs leave the index


@pytest.mark.slow
def test_a_message_popped_by_something_that_died_is_sent_again(own_redis_url, start_worker):
    url = own_redis_url
    client = ChalkClient(url)
    jobs = [ScoringJob(id=f"p-{i:02d}", judge=AlwaysPassJudge()) for i in range(30)]
    batch = client.submit_batch(jobs)
    store = redis.Redis.from_url(url)
    popped = pop_waiting(store, "chalk")  # the oldest message, taken by a consumer that died
    assert isinstance(popped, bytes) and job_of(popped) == "p-00"
    worker = start_worker(url, env={"CHALK_RECONCILE_S": "1"})
    results = batch.results(timeout=60)
    assert [r.status for r in results] == [JobStatus.SUCCEEDED] * 30
    worker.wait_for("the reconciler sent again 1 job(s) whose message was lost: p-00")


@pytest.mark.slow
def test_jobs_waiting_in_a_queue_are_left_alone_however_long_they_wait(own_redis_url, start_worker):
    url = own_redis_url
    # A worker of another queue runs the reconciler every quarter second meanwhile.
    worker = start_worker(url, env={"CHALK_RECONCILE_S": "1", "CHALK_QUEUE": "other"})
    parked = ChalkClient(url, settings=ChalkSettings(queue="parked"))
    parked.submit_batch([ScoringJob(id=f"w-{i:02d}", judge=AlwaysPassJudge()) for i in range(50)])
    store = redis.Redis.from_url(url)
    time.sleep(4.0)  # four grace periods
    assert store.llen("parked") == 50  # nothing sent twice
    assert "sent again" not in worker.text()
    # Gone by hand: sent again, once each, to the queue they were sent to.
    drop_waiting(store, "parked")
    wait_until(lambda: store.llen("parked") == 50, 10, "the jobs sent again")
    time.sleep(3.0)
    assert sorted(job_of(m) for m in waiting_messages(store, "parked")) == [
        f"w-{i:02d}" for i in range(50)
    ]


@pytest.mark.slow
def test_the_reconciler_publishes_what_a_dead_client_recorded_for_another_broker(
    own_redis_url, start_worker
):
    url = own_redis_url
    if not wait_port(5672, timeout=0.5):
        need("RabbitMQ on 127.0.0.1:5672")
    broker = "amqp://guest:guest@127.0.0.1:5672//"
    queue = f"chalk-test-{uuid.uuid4().hex[:8]}"
    settings = ChalkSettings(broker_url=broker, queue=queue)
    client = ChalkClient(url, settings=settings)
    # A client that recorded the job and died before publishing its message.
    job = prepare_job(ScoringJob(id="orphaned-submit", judge=AlwaysPassJudge()))
    chunks = client.store.submit([job], waiter="w-dead", messages=None)
    replies = [reply for _, answers in chunks for reply in answers]
    assert replies == ["queued"]
    assert redis.Redis.from_url(url).hget(keys.job("orphaned-submit"), "unpublished")
    env = {"CHALK_BROKER_URL": broker, "CHALK_QUEUE": queue, "CHALK_RECONCILE_S": "1"}
    worker = start_worker(url, env=env)
    try:
        result = client.job("orphaned-submit").wait(60)
        assert result is not None and result.status is JobStatus.SUCCEEDED
        worker.wait_for("the reconciler sent again 1 job(s)")
    finally:
        from kombu import Connection

        stop(worker.proc)
        with Connection(broker) as connection:
            connection.default_channel.queue_delete(queue)


@pytest.mark.slow
def test_health_names_messages_stranded_on_a_dead_worker(own_redis_url, start_worker, tmp_path):
    url = own_redis_url
    gate = tmp_path / "gate"
    doomed = start_worker(url, concurrency=2, env={"CHALK_LEASE_S": "60"})
    ChalkClient(url).submit_batch(gated("h", 2, str(tmp_path / "log"), str(gate)))
    store = redis.Redis.from_url(url)
    wait_until(lambda: held_count(store) == 2, 30, "two messages taken")
    doomed.proc.send_signal(signal.SIGKILL)
    doomed.proc.wait()
    # Its liveness lapses a lease after its last renewal (as if a minute had passed).
    store.zadd(keys.CONSUMERS, {m: 0 for m in store.zrange(keys.CONSUMERS, 0, -1)})
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHALK_")}
    report = subprocess.run(
        [sys.executable, "-m", "chalk_client.cli", "health"],
        env={**env, "CHALK_REDIS_URL": url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    out = report.stdout
    assert "0 delivered" in out, out  # nothing is with a live worker
    stranded = (
        f"WARNING: 2 message(s) of queue chalk stranded on a dead worker "
        f"({doomed.name}@{socket.gethostname()}, pid {doomed.pid}, silent for"
    )
    assert stranded in out, out
    # Its presence outlives it a little (two leases): health counts it among the live ones.
    assert "live workers give them back within about 5 s" in out, out
    gate.touch()
    start_worker(url)
    wait_until(lambda: held_count(store) == 0, 30, "the stranded messages given back")
