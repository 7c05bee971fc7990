"""The reconciler's scripts: find unfinished jobs without a message, and send them again.

See ``chalk_worker.cluster.reconcile`` for how the reconciler uses them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from chalk_client.cluster import keys
from chalk_client.cluster.messages import PUSH_HEAD
from chalk_client.cluster.script import (
    NOW_MS,
    Pipeline,
    Script,
    as_list,
    as_text,
    parse_kind,
    queue_script,
)
from chalk_client.errors import UnexpectedReplyError

RECONCILE = Script(
    "reconcile",
    """
-- KEYS: pending, running, consumers, taken (watermarks)
-- ARGV: most jobs to look at, grace ms, job key prefix, result key prefix
-- Looks at the unfinished jobs with no sign of life for a grace period. A job is fine
-- when it has a result or no record (forgotten: it leaves the index), holds a live
-- lease, was taken by a consumer that is registered, or waits in the queue; a fine
-- job is looked at again later (one waiting in a long queue, less and less often).
-- Returns the others as kind, id, task id, batch, publisher, queue:
-- 'lost' (to send again) or 'unpublished' (a submit died before publishing it).
"""
    + NOW_MS
    + """
local grace = tonumber(ARGV[2])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - grace,
                       'LIMIT', 0, tonumber(ARGV[1]))
local found = {}
local function later(id, at) redis.call('ZADD', KEYS[1], at, id) end
for _, id in ipairs(due) do
  local record = ARGV[3] .. id
  local rec = redis.call('HMGET', record, 'task', 'pushed', 'seq', 'queue', 'received',
                         'holder', 'unpublished', 'batch', 'submitted', 'status')
  if (not rec[9]) or rec[10] or redis.call('EXISTS', ARGV[4] .. id) == 1 then
    redis.call('ZREM', KEYS[1], id)
  else
    local deadline = redis.call('ZSCORE', KEYS[2], id)
    local task, pushed, seq, queue = rec[1] or '', tonumber(rec[2] or '0'), rec[3], rec[4]
    local kind = nil
    if deadline and tonumber(deadline) > now then
      later(id, tonumber(deadline))
    elseif deadline then
      later(id, now)  -- an expired lease: the workers' reaper sends it again
    elseif rec[7] then
      kind = 'unpublished'
    elseif rec[5] and rec[5] == task then
      if redis.call('ZSCORE', KEYS[3], rec[6] or '') then
        later(id, now)  -- its consumer is alive, or its messages are being given back
      else
        kind = 'lost'
      end
    elseif queue and ((seq and tonumber(seq) < tonumber(redis.call('ZSCORE', KEYS[4], queue)
                                                       or '0'))
                      or redis.call('LLEN', queue) == 0) then
      kind = 'lost'
    else
      later(id, now + math.max(0, now - pushed - grace))  -- waiting in the queue
    end
    if kind then
      for _, v in ipairs({kind, id, task, rec[8] or '', rec[7] or '', queue or ''}) do
        found[#found + 1] = v
      end
      later(id, now)
    end
  end
end
return found
""",
)


REPUBLISH = Script(
    "republish",
    """
-- KEYS: job, result, running, pending, push counter
-- ARGV: id, the task id the reconciler saw (or ''), message, its task id, default queue
-- Sends again a job whose message was lost, unless something happened to it since.
if redis.call('EXISTS', KEYS[2]) == 1 then return 'done' end
local rec = redis.call('HMGET', KEYS[1], 'task', 'queue', 'submitted', 'status')
if (not rec[3]) or rec[4] then return 'missing' end
if (rec[1] or '') ~= ARGV[2] then return 'changed' end
"""
    + NOW_MS
    + PUSH_HEAD
    + """
local deadline = redis.call('ZSCORE', KEYS[3], ARGV[1])
if deadline and tonumber(deadline) > now then return 'running' end
push_head(KEYS[1], KEYS[4], KEYS[5], ARGV[1], rec[2] or ARGV[5], ARGV[3], ARGV[4], now)
return 'requeued'
""",
)


CLAIM_UNPUBLISHED = Script(
    "claim-unpublished",
    """
-- KEYS: job, pending
-- ARGV: id, the publishing submit the reconciler saw, new publisher
-- The reconciler takes over the publish of a job whose submit died before publishing.
if redis.call('HGET', KEYS[1], 'unpublished') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'unpublished', ARGV[3])
"""
    + NOW_MS
    + """
redis.call('ZADD', KEYS[2], now, ARGV[1])
return 1
""",
)


PASS_LIMIT = 1000
"""Most jobs one pass looks at."""


class StrayKind(StrEnum):
    """Why a job the reconciler found has no message."""

    LOST = "lost"
    """Its message was lost (a crash, a Redis restart, a queue emptied): send it again."""
    UNPUBLISHED = "unpublished"
    """Its submit died before publishing it through a separate broker: publish it."""


class RepublishAnswer(StrEnum):
    """What the republish script did with a lost job."""

    REQUEUED = "requeued"
    """Its new message is at the head of its queue."""
    DONE = "done"
    """It has a result: left alone."""
    MISSING = "missing"
    """No record, or a finished one: left alone."""
    CHANGED = "changed"
    """It was sent again since it was seen: left alone."""
    RUNNING = "running"
    """A worker holds its lease: left alone."""


@dataclass(frozen=True)
class Stray:
    """A job the reconciler found without a message, and why (``kind``); with its latest
    task id, batch, publisher and queue (``""``: not a Redis list)."""

    kind: StrayKind
    job_id: str
    task_id: str
    batch: str
    publisher: str
    queue: str


def queue_reconcile(pipe: Pipeline, grace_ms: int) -> None:
    """Queue a look at the jobs without a sign of life for ``grace_ms`` (``parse_strays``)."""
    queue_script(
        pipe,
        RECONCILE,
        [keys.PENDING, keys.RUNNING, keys.CONSUMERS, keys.TAKEN],
        [PASS_LIMIT, grace_ms, keys.JOB_PREFIX, keys.RESULT_PREFIX],
    )


def parse_strays(reply: object) -> list[Stray]:
    """The jobs without a message a reconcile script found.

    Raises ``UnexpectedReplyError`` for a reply no reconcile script gives.
    """
    values = as_list(reply)
    if len(values) % 6:
        raise UnexpectedReplyError(
            f"a reconcile script replied {len(values)} values, not 6 per job"
        )
    strays = []
    for i in range(0, len(values), 6):
        job_id, task_id, batch, publisher, queue = (as_text(v) for v in values[i + 1 : i + 6])
        kind = parse_kind(StrayKind, values[i])
        strays.append(Stray(kind, job_id, task_id, batch, publisher, queue))
    return strays


def parse_republish(reply: object) -> RepublishAnswer:
    """What a republish script did."""
    return parse_kind(RepublishAnswer, reply)


def queue_republish(pipe: Pipeline, stray: Stray, message: str, task_id: str, queue: str) -> None:
    """Queue sending a lost job again, unless something happened to it since it was seen."""
    queue_script(
        pipe,
        REPUBLISH,
        [
            keys.job(stray.job_id),
            keys.result(stray.job_id),
            keys.RUNNING,
            keys.PENDING,
            keys.PUSHES,
        ],
        [stray.job_id, stray.task_id, message, task_id, queue],
    )


def queue_claim_unpublished(pipe: Pipeline, stray: Stray, publisher: str) -> None:
    """Queue taking over the publish of a job whose submit died before publishing it."""
    queue_script(
        pipe,
        CLAIM_UNPUBLISHED,
        [keys.job(stray.job_id), keys.PENDING],
        [stray.job_id, stray.publisher, publisher],
    )
