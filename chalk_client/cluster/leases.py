"""Running jobs: the workers' scripts that start, renew, reap and send them again.

A job a worker starts gets a lease: its owner token in its record (``owner``) and a
deadline in ``chalk:running``, renewed while the job runs. A job whose lease
ran out (its worker died) is sent again by any live worker, in the script that
frees the lease if it is still expired: a worker dying halfway leaves the lease
to the next one, never a job without a message. The script that writes the
result and frees the lease is ``chalk_client.cluster.finish``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from chalk_client.cluster import keys
from chalk_client.cluster.messages import PUSH_HEAD
from chalk_client.cluster.script import (
    NOW_MS,
    Pipeline,
    Script,
    as_bytes,
    as_int,
    as_list,
    as_text,
    parse_kind,
    queue_script,
)
from chalk_client.errors import UnexpectedReplyError

START = Script(
    "start",
    """
-- KEYS: job, result, running
-- ARGV: id, owner token, lease ms, blob key prefix, largest archive returned inline,
--       the task id of the message that started it (or ''), the worker's node name,
--       '1' to return the push number of the message taken (no RECEIVE noted it)
-- A larger archive is left in Redis for the worker to read in pieces ('large'). The
-- first write (ZADD) needs memory: a full Redis refuses the start whole.
local rec = redis.call('HMGET', KEYS[1], 'job', 'blob', 'owner', 'unpublished', 'status',
                       'task', 'seq', 'head', 'queue', 'attempts')
if not rec[1] then
  if redis.call('EXISTS', KEYS[2]) == 1 then return {'done'} end
  return {'missing'}
end
if rec[5] then return {'done'} end
"""
    + NOW_MS
    + """
if rec[3] and rec[3] ~= '' then
  local deadline = redis.call('ZSCORE', KEYS[3], ARGV[1])
  if deadline and tonumber(deadline) > now then return {'busy', rec[3]} end
end
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[3]), ARGV[1])
local n = (tonumber(rec[10]) or 0) + 1
redis.call('HSET', KEYS[1], 'owner', ARGV[2], 'started', ARGV[6], 'worker', ARGV[7],
           'attempts', n)
-- Its message was delivered: a submit that failed to publish it must not release it.
if rec[4] then redis.call('HDEL', KEYS[1], 'unpublished') end
-- The latest message, pushed at the queue's tail, was taken: the caller moves the queue's
-- watermark to its push number (a few jobs at a time), when no RECEIVE did.
local seq, queue = '', ''
if ARGV[8] == '1' and rec[6] == ARGV[6] and rec[8] == '0' and rec[9] then
  seq, queue = rec[7], rec[9]
end
local digest = rec[2] or ''
local lane = rec[9] or ''
if digest == '' then return {'start', n, rec[1], 'none', '', seq, queue, lane} end
local size = redis.call('STRLEN', ARGV[4] .. digest)
if size == 0 then return {'start', n, rec[1], 'missing', digest, seq, queue, lane} end
if size > tonumber(ARGV[5]) then
  return {'start', n, rec[1], 'large', digest, seq, queue, lane}
end
return {'start', n, rec[1], 'ok', redis.call('GET', ARGV[4] .. digest), seq, queue, lane}
""",
)


HEARTBEAT = Script(
    "heartbeat",
    """
-- KEYS: running
-- ARGV: owner token, lease ms, job key prefix, result key prefix, job ids...
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
  if redis.call('HGET', ARGV[3] .. ARGV[i], 'owner') == ARGV[1] then
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
-- KEYS: running, job, result, pending, push counter
-- ARGV: id, message (or '': claim the lease while the caller publishes elsewhere),
--       its task id, claim token, lease ms, default queue
-- Sends again a job whose lease expired (its worker died): 'requeued' (message at the
-- head), 'claimed', or left alone: 'done', 'gone' (another worker sent it), 'alive'
-- (renewed meanwhile), 'missing' (no record).
redis.call('ZREM', KEYS[1], '')  -- a write that needs no memory: the script runs whole
"""
    + NOW_MS
    + PUSH_HEAD
    + """
local id = ARGV[1]
if redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('ZREM', KEYS[1], id)
  return 'done'
end
local deadline = redis.call('ZSCORE', KEYS[1], id)
if not deadline then return 'gone' end
if tonumber(deadline) > now then return 'alive' end
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZREM', KEYS[4], id)
  return 'missing'
end
if ARGV[2] == '' then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[5]), id)
  redis.call('HSET', KEYS[2], 'owner', ARGV[4])
  return 'claimed'
end
redis.call('ZREM', KEYS[1], id)
redis.call('HSET', KEYS[2], 'owner', '')
local queue = redis.call('HGET', KEYS[2], 'queue') or ARGV[6]
push_head(KEYS[2], KEYS[4], KEYS[5], id, queue, ARGV[2], ARGV[3], now)
return 'requeued'
""",
)


LET_GO = Script(
    "let-go",
    """
-- KEYS: running, job
-- ARGV: id, claim token
-- The lease REQUEUE claimed is given up once the job's message was published.
if redis.call('HGET', KEYS[2], 'owner') == ARGV[2] then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HSET', KEYS[2], 'owner', '')
  return 1
end
return 0
""",
)


INLINE_ARCHIVE_BYTES = 1 << 20
"""Archives up to this size come back with the lease; larger ones are read in pieces."""
REAP_BATCH = 100
"""Most expired leases one reap lists."""


class StartOutcome(StrEnum):
    """What the start script found (its reply's first word)."""

    START = "start"
    """The lease is ours: score the job."""
    DONE = "done"
    """The job has a result."""
    BUSY = "busy"
    """Another worker holds a live lease."""
    MISSING = "missing"
    """No record: never submitted, or expired."""


class BlobState(StrEnum):
    """Where a started job's submission archive is."""

    NONE = "none"
    """The job has no submission."""
    OK = "ok"
    """It came back with the lease."""
    LARGE = "large"
    """It is too large to come back whole: read it in pieces."""
    MISSING = "missing"
    """It expired."""


class RequeueAnswer(StrEnum):
    """What the requeue script did with an expired lease."""

    REQUEUED = "requeued"
    """The job's new message is at the head of its queue."""
    CLAIMED = "claimed"
    """The lease is the caller's while it publishes the job elsewhere."""
    DONE = "done"
    """The job has a result: left alone."""
    GONE = "gone"
    """No lease any more (another worker sent it): left alone."""
    ALIVE = "alive"
    """The lease was renewed meanwhile: left alone."""
    MISSING = "missing"
    """No record: the lease was dropped."""


@dataclass(frozen=True)
class Start:
    """What the start script found: ``outcome``, and for ``start`` the job's record and archive."""

    outcome: StartOutcome
    attempts: int = 0
    record: bytes = b""
    blob: BlobState = BlobState.NONE
    archive: bytes | None = None
    """The archive, when ``blob`` is ``ok``."""
    digest: str = ""
    """The archive's content hash, for ``large`` and ``missing``."""
    holder: str = ""
    taken: tuple[str, int] | None = None
    """The queue and push number of the message taken, when it was the job's latest pushed
    at the queue's tail and no ``RECEIVE`` noted it: the queue's watermark moves to it."""
    lane: str = ""
    """The lane its message was sent to (``""``: none, a separate broker)."""


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
    task_id: str = "",
    node: str = "",
    mark_taken: bool = False,
) -> None:
    """Queue the start script: take the job's lease, count an attempt, read its record.

    ``task_id`` (the message's) and ``node`` (the worker's name) are recorded on
    the job, to report the attempt lost should the worker die. ``mark_taken``: no
    ``RECEIVE`` noted the message when it was taken (a pool that starts each job as
    it takes it): the reply says which watermark to move (``Start.taken``).
    """
    queue_script(
        pipe,
        START,
        [keys.job(job_id), keys.result(job_id), keys.RUNNING],
        [
            job_id,
            owner,
            lease_ms,
            keys.BLOB_PREFIX,
            INLINE_ARCHIVE_BYTES,
            task_id,
            node,
            "1" if mark_taken else "0",
        ],
    )


def parse_start(reply: object) -> Start:
    """The ``Start`` a start script's reply describes.

    Raises ``UnexpectedReplyError`` for a reply no start script gives.
    """
    values = as_list(reply)
    outcome = parse_kind(StartOutcome, values[0] if values else None)
    if outcome is StartOutcome.BUSY:
        return Start(outcome, holder=as_text(values[1]))
    if outcome is not StartOutcome.START:
        return Start(outcome)
    if len(values) != 8:
        raise UnexpectedReplyError(f"a start script replied {len(values)} values, not 8")
    attempts, record = as_int(values[1]), as_bytes(values[2])
    blob = parse_kind(BlobState, values[3])
    seq, queue = as_text(values[5]), as_text(values[6])
    taken = (queue, int(seq)) if seq and queue else None
    lane = as_text(values[7])
    if blob is BlobState.OK:
        return Start(outcome, attempts, record, blob, as_bytes(values[4]), taken=taken, lane=lane)
    return Start(outcome, attempts, record, blob, None, as_text(values[4]), taken=taken, lane=lane)


def queue_heartbeat(pipe: Pipeline, job_ids: Sequence[str], owner: str, lease_ms: int) -> None:
    """Queue the renewal of ``owner``'s leases of ``job_ids``; its reply: those lost."""
    queue_script(
        pipe,
        HEARTBEAT,
        [keys.RUNNING],
        [owner, lease_ms, keys.JOB_PREFIX, keys.RESULT_PREFIX, *job_ids],
    )


def queue_reap(pipe: Pipeline) -> None:
    """Queue the listing of expired leases (``parse_expired`` reads its reply)."""
    queue_script(pipe, REAP, [keys.RUNNING], [keys.JOB_PREFIX, REAP_BATCH])


def parse_expired(reply: object) -> list[Expired]:
    """The expired leases a reap script listed."""
    values = [as_text(value) for value in as_list(reply)]
    if len(values) % 5:
        raise UnexpectedReplyError(f"a reap script replied {len(values)} values, not 5 per lease")
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
        [keys.RUNNING, keys.job(job_id), keys.result(job_id), keys.PENDING, keys.PUSHES],
        [job_id, message, task_id, token, lease_ms, queue],
    )


def queue_let_go(pipe: Pipeline, job_id: str, token: str) -> None:
    """Queue giving up a lease taken over with ``queue_requeue`` (no message)."""
    queue_script(pipe, LET_GO, [keys.RUNNING, keys.job(job_id)], [job_id, token])
