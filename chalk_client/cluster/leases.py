"""Running jobs: the workers' scripts that start, renew, reap, send again and finish them.

A job a worker starts gets a lease: its owner token in ``chalk:owner:ID`` and a
deadline in ``chalk:running``, renewed while the job runs. A job whose lease
ran out (its worker died) is sent again by any live worker, in the script that
frees the lease if it is still expired: a worker dying halfway leaves the lease
to the next one, never a job without a message. The result is written once
(``SET NX``), so a job run twice still has one result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from chalk_client.cluster import keys
from chalk_client.cluster.keys import DONE_TTL_S
from chalk_client.cluster.messages import PUSH_HEAD
from chalk_client.cluster.script import NOW_MS, Pipeline, Script, as_text, queue_script

START = Script(
    "start",
    """
-- KEYS: job, result, owner, running, attempts
-- ARGV: id, owner token, lease ms, ttl, blob key prefix, largest archive returned inline,
--       the task id of the message that started it (or ''), the worker's node name
-- A larger archive is left in Redis for the worker to read in pieces ('large').
if redis.call('EXISTS', KEYS[2]) == 1 then return {'done'} end
local rec = redis.call('HMGET', KEYS[1], 'job', 'blob')
if not rec[1] then return {'missing'} end
"""
    + NOW_MS
    + """
local holder = redis.call('GET', KEYS[3])
if holder then
  local deadline = redis.call('ZSCORE', KEYS[4], ARGV[1])
  if deadline and tonumber(deadline) > now then return {'busy', holder} end
end
redis.call('SET', KEYS[3], ARGV[2], 'EX', tonumber(ARGV[4]))
redis.call('ZADD', KEYS[4], now + tonumber(ARGV[3]), ARGV[1])
-- Its message was delivered: a submit that failed to publish it must not release it.
redis.call('HDEL', KEYS[1], 'unpublished')
if ARGV[7] ~= '' then redis.call('HSET', KEYS[1], 'started', ARGV[7], 'worker', ARGV[8]) end
local n = redis.call('INCR', KEYS[5])
redis.call('EXPIRE', KEYS[5], tonumber(ARGV[4]))
local digest = rec[2] or ''
if digest == '' then return {'start', n, rec[1], 'none', ''} end
local size = redis.call('STRLEN', ARGV[5] .. digest)
if size == 0 then return {'start', n, rec[1], 'missing', digest} end
if size > tonumber(ARGV[6]) then return {'start', n, rec[1], 'large', digest} end
return {'start', n, rec[1], 'ok', redis.call('GET', ARGV[5] .. digest)}
""",
)


HEARTBEAT = Script(
    "heartbeat",
    """
-- KEYS: running
-- ARGV: owner token, lease ms, owner key prefix, result key prefix, job ids...
-- Returns the ids whose lease another worker took (a finished job is not lost).
"""
    + NOW_MS
    + """
-- Renewing moves deadlines, it does not add members: it must go on when Redis is at
-- maxmemory, or idle workers would reap running jobs and score them again. Redis
-- refuses a script at its first write that may use memory (ZADD) unless it already
-- wrote: so first a write that never needs memory (ZREM of no member).
redis.call('ZREM', KEYS[1], '')
local lost = {}
for i = 5, #ARGV do
  if redis.call('GET', ARGV[3] .. ARGV[i]) == ARGV[1] then
    redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[i])
  elseif redis.call('EXISTS', ARGV[4] .. ARGV[i]) == 0 then
    lost[#lost + 1] = ARGV[i]
  end
end
return lost
""",
)


REAP = Script(
    "reap",
    """
-- KEYS: running
-- ARGV: job key prefix, most leases to list
-- Lists expired leases as id, batch, the task id that started it, the node that ran
-- it and its queue; REQUEUE takes them.
"""
    + NOW_MS
    + """
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local found = {}
for _, id in ipairs(expired) do
  local rec = redis.call('HMGET', ARGV[1] .. id, 'batch', 'started', 'worker', 'queue')
  found[#found + 1] = id
  found[#found + 1] = rec[1] or ''
  found[#found + 1] = rec[2] or ''
  found[#found + 1] = rec[3] or ''
  found[#found + 1] = rec[4] or ''
end
return found
""",
)


REQUEUE = Script(
    "requeue",
    """
-- KEYS: running, owner, job, result, pending, push counter
-- ARGV: id, message (or '': claim the lease while the caller publishes elsewhere),
--       its task id, claim token, lease ms, default queue
-- Sends again a job whose lease expired (its worker died): 'requeued' (message at the
-- head), 'claimed', or left alone: 'done', 'gone' (another worker sent it), 'alive'
-- (renewed meanwhile), 'missing' (no record).
redis.call('ZREM', KEYS[1], '')  -- a write that needs no memory: see the module's doc
"""
    + NOW_MS
    + PUSH_HEAD
    + """
local id = ARGV[1]
if redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('ZREM', KEYS[1], id)
  redis.call('DEL', KEYS[2])
  return 'done'
end
local deadline = redis.call('ZSCORE', KEYS[1], id)
if not deadline then return 'gone' end
if tonumber(deadline) > now then return 'alive' end
if redis.call('EXISTS', KEYS[3]) == 0 then
  redis.call('ZREM', KEYS[1], id)
  redis.call('DEL', KEYS[2])
  redis.call('ZREM', KEYS[5], id)
  return 'missing'
end
if ARGV[2] == '' then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[5]), id)
  redis.call('SET', KEYS[2], ARGV[4], 'PX', tonumber(ARGV[5]) * 4)
  return 'claimed'
end
redis.call('ZREM', KEYS[1], id)
redis.call('DEL', KEYS[2])
local queue = redis.call('HGET', KEYS[3], 'queue') or ARGV[6]
push_head(KEYS[3], KEYS[5], KEYS[6], id, queue, ARGV[2], ARGV[3], now)
return 'requeued'
""",
)


LET_GO = Script(
    "let-go",
    """
-- KEYS: running, owner
-- ARGV: id, claim token
-- The lease REQUEUE claimed is given up once the job's message was published.
if redis.call('GET', KEYS[2]) == ARGV[2] then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('DEL', KEYS[2])
  return 1
end
return 0
""",
)


FINISH = Script(
    "finish",
    """
-- KEYS: result, running, owner, watchers, pending
-- ARGV: id, result json, result ttl, owner token, done-list key prefix
-- A done list lives DONE_TTL_S after its last push: its waiter pops it within
-- seconds, and one that stopped waiting leaves nothing for long. The first write
-- (ZREM) needs no memory, so a finish runs whole on a full Redis.
redis.call('ZREM', KEYS[5], ARGV[1])
local holder = redis.call('GET', KEYS[3])
if (not holder) or holder == ARGV[4] then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('DEL', KEYS[3])
end
local ttl = tonumber(ARGV[3])
if not redis.call('SET', KEYS[1], ARGV[2], 'NX', 'EX', ttl) then return 0 end
for _, waiter in ipairs(redis.call('SMEMBERS', KEYS[4])) do
  redis.call('RPUSH', ARGV[5] .. waiter, ARGV[1])
  redis.call('EXPIRE', ARGV[5] .. waiter, DONE_TTL_S)
end
redis.call('DEL', KEYS[4])
return 1
""".replace("DONE_TTL_S", str(DONE_TTL_S)),
)


INLINE_ARCHIVE_BYTES = 1 << 20
"""Archives up to this size come back with the lease; larger ones are read in pieces."""
REAP_BATCH = 100
"""Most expired leases one reap lists."""


@dataclass(frozen=True)
class Start:
    """What the start script found.

    ``outcome`` is ``start`` (the lease is ours: score the job), ``done`` (it has
    a result), ``busy`` (another worker holds a live lease) or ``missing`` (no
    record: never submitted, or expired).
    """

    outcome: str
    attempts: int = 0
    record: bytes = b""
    blob: str = "none"
    """``none`` (no submission), ``ok``, ``large`` (to read in pieces) or ``missing``
    (the archive expired)."""
    archive: bytes | None = None
    digest: str = ""
    """The archive's content hash, for ``large`` and ``missing``."""
    holder: str = ""


@dataclass(frozen=True)
class Expired:
    """A lease that ran out: the job, its batch (or ``""``), the task id that started it,
    the node name of the worker that ran it, and its queue (``""``: not a Redis list)."""

    job_id: str
    batch: str
    started: str
    node: str
    queue: str


def queue_start(
    pipe: Pipeline,
    job_id: str,
    owner: str,
    *,
    lease_ms: int,
    ttl_s: int,
    task_id: str = "",
    node: str = "",
) -> None:
    """Queue the start script: take the job's lease, count an attempt, read its record.

    ``task_id`` (the message's) and ``node`` (the worker's name) are recorded on
    the job, to report the attempt lost should the worker die.
    """
    queue_script(
        pipe,
        START,
        [
            keys.job(job_id),
            keys.result(job_id),
            keys.owner(job_id),
            keys.RUNNING,
            keys.attempts(job_id),
        ],
        [job_id, owner, lease_ms, ttl_s, keys.BLOB_PREFIX, INLINE_ARCHIVE_BYTES, task_id, node],
    )


def parse_start(reply: Any) -> Start:
    """The ``Start`` a start script's reply describes."""
    outcome = as_text(reply[0])
    if outcome == "busy":
        return Start(outcome, holder=as_text(reply[1]))
    if outcome != "start":
        return Start(outcome)
    blob = as_text(reply[3])
    if blob == "ok":
        return Start(outcome, int(reply[1]), reply[2], blob, reply[4])
    return Start(outcome, int(reply[1]), reply[2], blob, None, as_text(reply[4]))


def queue_finish(pipe: Pipeline, job_id: str, result_json: str, owner: str, *, ttl_s: int) -> None:
    """Queue the finish script: write the one result, free the lease, tell the waiters."""
    queue_script(
        pipe,
        FINISH,
        [
            keys.result(job_id),
            keys.RUNNING,
            keys.owner(job_id),
            keys.watchers(job_id),
            keys.PENDING,
        ],
        [job_id, result_json, ttl_s, owner, keys.DONE_PREFIX],
    )


def queue_heartbeat(pipe: Pipeline, job_ids: Sequence[str], owner: str, lease_ms: int) -> None:
    """Queue the renewal of ``owner``'s leases of ``job_ids``; its reply: those lost."""
    queue_script(
        pipe,
        HEARTBEAT,
        [keys.RUNNING],
        [owner, lease_ms, keys.OWNER_PREFIX, keys.RESULT_PREFIX, *job_ids],
    )


def queue_reap(pipe: Pipeline) -> None:
    """Queue the listing of expired leases (``parse_expired`` reads its reply)."""
    queue_script(pipe, REAP, [keys.RUNNING], [keys.JOB_PREFIX, REAP_BATCH])


def parse_expired(reply: Any) -> list[Expired]:
    """The expired leases a reap script listed."""
    values = [as_text(value) for value in reply]
    return [Expired(*values[i : i + 5]) for i in range(0, len(values), 5)]


def queue_requeue(
    pipe: Pipeline,
    job_id: str,
    message: str,
    task_id: str,
    *,
    token: str,
    lease_ms: int,
    queue: str,
) -> None:
    """Queue sending an expired job again (``message`` at its queue's head) or, with no
    message, taking its lease over (``token``) while it is published elsewhere."""
    queue_script(
        pipe,
        REQUEUE,
        [
            keys.RUNNING,
            keys.owner(job_id),
            keys.job(job_id),
            keys.result(job_id),
            keys.PENDING,
            keys.PUSHES,
        ],
        [job_id, message, task_id, token, lease_ms, queue],
    )


def queue_let_go(pipe: Pipeline, job_id: str, token: str) -> None:
    """Queue giving up a lease taken over with ``queue_requeue`` (no message)."""
    queue_script(pipe, LET_GO, [keys.RUNNING, keys.owner(job_id)], [job_id, token])
