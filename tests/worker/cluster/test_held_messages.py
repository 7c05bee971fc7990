"""Held messages and the reconciler's scripts on a real Redis, without Celery.

Each case is a step of a job's life that another step may race with: a held
message given back while its job runs, finished, or was sent again; a consumer
found dead that renews itself; a job looked at in each of its states.
"""

from __future__ import annotations

import base64
import json
import time

import redis
from queueing import drop_waiting, take_raw, waiting_messages

from chalk_client import ChalkClient, ChalkSettings, JobResult, JobStatus, ScoringJob
from chalk_client.cluster import keys
from chalk_client.cluster.lanes import lane_for
from chalk_client.judges import AlwaysPassJudge
from chalk_worker.cluster.delivery import HeldEntry, HeldMessages
from chalk_worker.cluster.leases import LeaseStore
from chalk_worker.cluster.reconcile import Reconciler

QUEUE = "q"
CONSUMER = f"{QUEUE}@w1:host:4242:abcd:1"


def job_of(message: bytes | str) -> str:
    return str(json.loads(base64.b64decode(json.loads(message)["body"]))[0][0])


def setup(url: str, *ids: str) -> tuple[redis.Redis, HeldMessages, LeaseStore]:
    settings = ChalkSettings(queue=QUEUE, lease_s=30)
    ChalkClient(url, settings=settings).submit_batch(
        [ScoringJob(id=job_id, judge=AlwaysPassJudge()) for job_id in ids]
    )
    store = redis.Redis.from_url(url)
    held = HeldMessages(store, lease_ms=30_000)
    held.register([CONSUMER])
    return store, held, LeaseStore(store, settings)


def take(store: redis.Redis, held: HeldMessages) -> HeldEntry:
    """What a worker does: take the next message into its held list, then note it."""
    raw = take_raw(store, QUEUE, CONSUMER)
    assert raw is not None
    entry = HeldEntry.parse(raw)
    held.receive(entry.job_id, entry.task_id, CONSUMER)
    return entry


def test_a_taken_message_is_noted_on_its_job_and_moves_the_watermark(own_redis_url):
    store, held, _ = setup(own_redis_url, "a", "b")
    entry = take(store, held)
    assert entry.job_id == "a" and entry.batch  # a batch label, from the message
    record = store.hgetall(keys.job("a"))
    assert record[b"received"] == record[b"task"] == entry.task_id.encode()
    assert record[b"holder"] == CONSUMER.encode()
    assert store.zscore(keys.TAKEN, record[b"queue"]) == float(record[b"seq"])
    assert record[b"queue"].decode() == lane_for(QUEUE, "normal", entry.batch)
    assert store.llen(keys.held(CONSUMER)) == 1 and store.llen(QUEUE) == 1


def test_giving_back_pushes_at_the_head_only_what_nobody_runs_or_finished(own_redis_url):
    store, held, leases = setup(own_redis_url, "idle", "running", "done", "stale")
    entries = {entry.job_id: entry for entry in (take(store, held) for _ in range(4))}
    leases.start("running", "another worker")
    leases.start("done", "another worker")
    leases.finish(JobResult(job_id="done", status=JobStatus.SUCCEEDED), "another worker")
    store.hset(keys.job("stale"), "task", "a newer message")  # sent again meanwhile
    outcomes = held.give_back(CONSUMER, list(entries.values()), fresh=True)
    assert {entry.job_id: outcome for entry, outcome, _ in outcomes} == {
        "idle": "requeued",
        "running": "running",
        "done": "done",
        "stale": "stale",
    }
    assert store.llen(keys.held(CONSUMER)) == 0
    assert [job_of(m) for m in waiting_messages(store, QUEUE)] == ["idle"]
    new_task = next(task for entry, _, task in outcomes if entry.job_id == "idle")
    assert store.hget(keys.job("idle"), "task") == new_task.encode()
    assert new_task != entries["idle"].task_id
    assert held.give_back(CONSUMER, [entries["idle"]], fresh=True)[0][1] == "gone"  # once


def test_an_expired_lease_given_back_with_its_message_is_sent_once(own_redis_url):
    store, held, leases = setup(own_redis_url, "j")
    entry = take(store, held)
    leases.start("j", "a dead worker", entry.task_id, "w1@host")
    store.zadd(keys.RUNNING, {"j": 0})  # its lease ran out
    expired = leases.reap()
    assert [(one.job_id, one.started, one.node) for one in expired] == [
        ("j", entry.task_id, "w1@host")
    ]
    assert held.give_back(CONSUMER, [entry], fresh=True)[0][1] == "requeued"
    assert [answer for _, answer, _ in leases.requeue(expired, QUEUE)] == ["gone"]
    assert store.llen(QUEUE) == 1 and store.zcard(keys.RUNNING) == 0


def test_a_consumer_found_dead_that_renews_itself_stays_registered(own_redis_url):
    store, held, _ = setup(own_redis_url, "j")
    store.zadd(keys.CONSUMERS, {CONSUMER: 0})
    assert held.dead_consumers() == [CONSUMER]
    held.register([CONSUMER])  # it was only slow: alive again before the give-back ended
    assert held.give_back_all(CONSUMER, fresh=True) == []
    assert store.zscore(keys.CONSUMERS, CONSUMER) is not None
    store.zadd(keys.CONSUMERS, {CONSUMER: 0})
    held.give_back_all(CONSUMER, fresh=True)
    assert store.zscore(keys.CONSUMERS, CONSUMER) is None  # dead for good: forgotten


def test_the_reconciler_sends_again_only_jobs_without_a_message(own_redis_url):
    store, held, leases = setup(own_redis_url, "taken", "running", "lost", "done", "waiting")
    for _ in range(4):  # a consumer took the four oldest ...
        take(store, held)
    leases.start("running", "a live worker")
    leases.finish(JobResult(job_id="done", status=JobStatus.SUCCEEDED), "a live worker")
    store.hdel(keys.job("lost"), "received")  # ... and the note of one of them was lost
    reconciler = Reconciler(held, ChalkSettings(queue=QUEUE, reconcile_s=0.05), "me")
    time.sleep(0.1)  # no sign of life for the grace period
    assert [(s.kind, s.job_id) for s in reconciler.strays()] == [("lost", "lost")]
    assert store.zscore(keys.PENDING, "done") is None  # finished: out of the index
    drop_waiting(store, QUEUE)  # now the one waiting is gone too (by hand)
    time.sleep(0.3)  # it waited a while: looked at again after a longer pause
    assert sorted(one.job_id for one in reconciler.run(None)) == ["lost", "waiting"]
    assert sorted(job_of(m) for m in waiting_messages(store, QUEUE)) == ["lost", "waiting"]
    assert reconciler.run(None) == []  # the lock: one pass per quarter grace at most
