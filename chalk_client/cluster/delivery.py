"""Held messages: the scripts of the reliable queue (``BLMOVE`` into a list per consumer).

A consumer (a worker process's channel) takes each message into a held list of
its own and notes it on the job (``RECEIVE``); its liveness deadline in
``chalk:consumers`` is renewed while it lives (``CONSUMERS``). The messages of a
consumer that closed, or whose liveness lapsed (``DEAD_CONSUMERS``), are given
back one by one (``RESTORE``) and the consumer forgotten (``FORGET_CONSUMER``).
"""

from __future__ import annotations

from enum import StrEnum

from chalk_client.cluster import keys
from chalk_client.cluster.lanes import TOKEN, WATERMARK
from chalk_client.cluster.messages import PUSH_HEAD, HeldEntry
from chalk_client.cluster.script import NOW_MS, Pipeline, Script, queue_script

RECEIVE = Script(
    "receive",
    """
-- KEYS: job, taken (watermarks)
-- ARGV: task id, consumer, queue (if the record names none)
-- A consumer took the job's latest message from its lane. A message pushed at the
-- tail moves the lane's watermark (its push number): every message pushed before it
-- has left the lane too. An emptied lane has no watermark (see lanes.WATERMARK).
local rec = redis.call('HMGET', KEYS[1], 'task', 'seq', 'head', 'queue')
if rec[1] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'received', ARGV[1], 'holder', ARGV[2])
local lane = rec[4] or ARGV[3]
if rec[3] ~= '1' and rec[2] and redis.call('EXISTS', lane) == 1 then
  redis.call('ZADD', KEYS[2], 'GT', rec[2], lane)
end
return 1
""",
)


class RestoreAnswer(StrEnum):
    """What the restore script did with one held message."""

    REQUEUED = "requeued"
    """It is at the head of its queue again."""
    GONE = "gone"
    """It was not held any more."""
    DROPPED = "dropped"
    """Not a job's message: dropped."""
    TOKEN = "token"
    """A token of the queue's list (``chalk_client.cluster.lanes``): back in the list."""
    DONE = "done"
    """Its job has a result: dropped."""
    MISSING = "missing"
    """No record of its job: dropped."""
    STALE = "stale"
    """A newer message of its job was sent: dropped."""
    RUNNING = "running"
    """A worker holds its job's lease: dropped."""


RESTORE = Script(
    "restore",
    """
-- KEYS: held list, job, result, running, pending, push counter
-- ARGV: the held entry, job id (or '': not a job's message), its task id,
--       new message (or '': push the entry itself), new task id, default queue
-- Gives back one message a consumer held: 'requeued' at the head of the queue when it
-- is still the job's latest and nobody runs the job; a token back in the queue's list
-- ('token'); otherwise dropped: 'gone' (not held any more), 'dropped' (no job), 'done',
-- 'missing', 'stale' (a newer message was sent), 'running' (a live lease).
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then return 'gone' end
if ARGV[1] == 'TOKEN' then
  redis.call('LPUSH', ARGV[6], ARGV[1])  -- a wake-up taken and not used: for another worker
  return 'token'
end
if ARGV[2] == '' then return 'dropped' end
local id = ARGV[2]
if redis.call('EXISTS', KEYS[3]) == 1 then return 'done' end
local rec = redis.call('HMGET', KEYS[2], 'task', 'queue', 'submitted', 'status')
if not rec[3] then return 'missing' end
if rec[4] then return 'done' end
if rec[1] and rec[1] ~= ARGV[3] then return 'stale' end
""".replace("TOKEN", TOKEN)
    + NOW_MS
    + PUSH_HEAD
    + """
local deadline = redis.call('ZSCORE', KEYS[4], id)
if deadline and tonumber(deadline) > now then return 'running' end
if deadline then  -- an expired lease: this message is the job's next run
  redis.call('ZREM', KEYS[4], id)
  redis.call('HSET', KEYS[2], 'owner', '')
end
local message, task = ARGV[4], ARGV[5]
if message == '' then message, task = ARGV[1], ARGV[3] end
push_head(KEYS[2], KEYS[5], KEYS[6], id, rec[2] or ARGV[6], message, task, now)
return 'requeued'
""",
)


CONSUMERS = Script(
    "consumers",
    """
-- KEYS: consumers
-- ARGV: lease ms, consumer ids...
-- Registers consumers, or renews them: their liveness runs a lease from now.
redis.call('ZREM', KEYS[1], '')  -- a write that needs no memory: see the module's doc
"""
    + NOW_MS
    + """
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[i])
end
return 1
""",
)


DEAD_CONSUMERS = Script(
    "dead-consumers",
    """
-- KEYS: consumers
-- ARGV: most consumers to list
-- Consumers whose liveness lapsed: their held messages are to be given back.
"""
    + NOW_MS
    + """
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
""",
)


FORGET_CONSUMER = Script(
    "forget-consumer",
    """
-- KEYS: held list, consumers
-- ARGV: consumer, '1' if its own process forgets it (its channel closed)
-- A consumer whose held list is empty is forgotten (1), unless it was renewed since
-- another worker found it dead (it lives: it stays registered).
if redis.call('LLEN', KEYS[1]) > 0 then return 0 end
if ARGV[2] ~= '1' then
  local deadline = redis.call('ZSCORE', KEYS[2], ARGV[1])
"""
    + NOW_MS
    + """
  if deadline and tonumber(deadline) > now then return 0 end
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
""",
)


DEAD_BATCH = 100
"""Most dead consumers one listing returns."""


def queue_receive(pipe: Pipeline, job_id: str, task_id: str, consumer: str) -> None:
    """Queue the note that ``consumer`` took the job's message ``task_id``."""
    queue_script(
        pipe,
        RECEIVE,
        [keys.job(job_id), keys.TAKEN],
        [task_id, consumer, keys.Consumer.parse(consumer).queue],
    )


def queue_restore(
    pipe: Pipeline, consumer: str, entry: HeldEntry, message: str, task_id: str
) -> None:
    """Queue giving back one held entry: ``message`` (``""``: the entry itself) as ``task_id``."""
    queue_script(
        pipe,
        RESTORE,
        [
            keys.held(consumer),
            keys.job(entry.job_id),
            keys.result(entry.job_id),
            keys.RUNNING,
            keys.PENDING,
            keys.PUSHES,
        ],
        [
            entry.raw,
            entry.job_id,
            entry.task_id,
            message,
            task_id,
            keys.Consumer.parse(consumer).queue,
        ],
    )


def queue_consumers(pipe: Pipeline, consumers: list[str], lease_ms: int) -> None:
    """Queue registering (or renewing) consumers: each lives a lease from now."""
    queue_script(pipe, CONSUMERS, [keys.CONSUMERS], [lease_ms, *consumers])


def queue_dead_consumers(pipe: Pipeline) -> None:
    """Queue the listing of consumers whose liveness lapsed (at most ``DEAD_BATCH``)."""
    queue_script(pipe, DEAD_CONSUMERS, [keys.CONSUMERS], [DEAD_BATCH])


def queue_forget_consumer(pipe: Pipeline, consumer: str, *, own: bool) -> None:
    """Queue forgetting a consumer whose held list is empty (``own``: its process does)."""
    queue_script(
        pipe,
        FORGET_CONSUMER,
        [keys.held(consumer), keys.CONSUMERS],
        [consumer, "1" if own else "0"],
    )


def queue_watermarks(pipe: Pipeline, taken: dict[str, int]) -> None:
    """Queue moving each lane's watermark up to the push number of a message taken."""
    if taken:
        args = [part for lane, seq in taken.items() for part in (lane, seq)]
        queue_script(pipe, WATERMARK, [keys.TAKEN], args)
