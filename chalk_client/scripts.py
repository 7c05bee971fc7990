"""The Lua scripts that make the cluster's state changes atomic.

Each script is one step of a job's life that must not interleave with another:
submitting (claim the id, store the record, enqueue, register the waiter),
confirming or releasing a record whose message a separate broker took or refused,
watching, receiving (a consumer took the message), starting (take the lease),
renewing leases and consumers, sending a job again (its worker died, its message
was lost, a consumer gave it back) and finishing (write the one result, tell the
waiters). Times come from Redis's own clock, so workers on machines with skewed
clocks agree. Keys are those of ``chalk_client.keys``; a few are derived inside a
script from a prefix (owners, done lists, records), which a single Redis allows.

Every unfinished job is in ``chalk:pending``, scored by the time of its last
sign of life: each step of its life sets it to now, finishing removes it, and
the reconciler looks at a job once a grace period (its own setting) has passed
since. Every message pushed for a job is
recorded on the job (``task``, ``pushed``, ``head``), so that at most one
message per job is kept alive by the steps that send jobs again.

Over ``maxmemory`` Redis refuses a script at its first write that may use
memory, unless the script has already written: scripts that must run on a full
Redis (renewals, finishing, sending a dead worker's job again) begin with a
write that never needs memory.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from chalk_client.keys import DONE_TTL_S


@dataclass(frozen=True)
class Script:
    """A Lua script, run by its SHA1 (``EVALSHA``), loaded again when Redis forgot it."""

    name: str
    text: str
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.text.encode()).hexdigest())


_NOW_MS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

_PUSH_HEAD = """
-- Push a job's message at the head of its queue (taken next) and record it as the
-- job's latest: a sign of life.
local function push_head(record, pending, id, queue, message, task, now)
  redis.call('RPUSH', queue, message)
  redis.call('HSET', record, 'task', task, 'pushed', now, 'head', '1')
  redis.call('HDEL', record, 'received', 'holder')
  redis.call('ZADD', pending, now, id)
end
"""

SUBMIT = Script(
    "submit",
    """
-- KEYS: job, result, watchers, broker queue, owner, pending
-- ARGV: id, job json, blob digest, job ttl, waiter, message (or ''),
--       retry failed ('1'/'0'), publish ('1': the caller publishes the message itself),
--       the message's task id, batch id (or '')
-- A recorded job is 'duplicate', unless its publish never went through (an
-- 'unpublished' record: that submit failed or died); then this caller sends it.
local ttl = tonumber(ARGV[4])
local publishes = ARGV[8] == '1'
local function enqueue()
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if ARGV[6] ~= '' then
    redis.call('LPUSH', KEYS[4], ARGV[6])
    redis.call('HSET', KEYS[1], 'task', ARGV[9], 'pushed', now, 'head', '0')
    redis.call('HDEL', KEYS[1], 'received', 'holder')
  end
  redis.call('ZADD', KEYS[6], now, ARGV[1])
end
local function record()
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'job', ARGV[2], 'blob', ARGV[3],
             'submitted', redis.call('TIME')[1], 'submitter', ARGV[5], 'batch', ARGV[10])
  -- The queue is named only when it is a list of this Redis (not another broker's).
  if publishes then
    redis.call('HSET', KEYS[1], 'unpublished', ARGV[5])
  else
    redis.call('HSET', KEYS[1], 'queue', KEYS[4])
  end
  redis.call('EXPIRE', KEYS[1], ttl)
  enqueue()
end
local function watch()
  redis.call('SADD', KEYS[3], ARGV[5])
  redis.call('EXPIRE', KEYS[3], ttl)
end
-- Registered first, whatever the answer: a finished job may be retried by someone
-- else (retry_failed) and its next result must wake this waiter too. SADD is also
-- the first write, one that needs memory: a full Redis refuses the script whole.
watch()
local found = redis.call('GET', KEYS[2])
if found then
  if ARGV[7] == '1' and cjson.decode(found)['status'] == 'failed' then
    redis.call('DEL', KEYS[2])
    record()
    return 'requeued'
  end
  return 'done'
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  local unpublished = redis.call('HGET', KEYS[1], 'unpublished')
  if unpublished and (publishes or ARGV[6] ~= '') then
    if redis.call('EXISTS', KEYS[5]) == 1 then
      redis.call('HDEL', KEYS[1], 'unpublished')  -- a worker started it: it was delivered
      return 'duplicate'
    end
    if publishes then
      redis.call('HSET', KEYS[1], 'unpublished', ARGV[5])
    else
      redis.call('HDEL', KEYS[1], 'unpublished')
    end
    enqueue()
    return 'queued'
  end
  return 'duplicate'
end
record()
return 'queued'
""",
)

PUBLISHED = Script(
    "published",
    """
-- KEYS: job, pending
-- ARGV: waiter, id
-- The submit whose waiter this is published the job's message: the record is complete,
-- and the broker (not the reconciler) looks after the message from now on.
local unpublished = redis.call('HGET', KEYS[1], 'unpublished')
if unpublished == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'unpublished')
end
if unpublished == ARGV[1] or not unpublished then
  redis.call('ZREM', KEYS[2], ARGV[2])
end
return 1
""",
)

RELEASE = Script(
    "release",
    """
-- KEYS: job, result, watchers, owner, pending
-- ARGV: waiter, id
-- After a failed publish: 'released' (the record this submit made is deleted, so the
-- next submit records and sends the job), 'unpublished' (another submit took the job
-- over and may have failed too: the next submit sends it) or 'queued' (a publish went
-- through, or a worker started the job: its message was delivered after all).
if redis.call('EXISTS', KEYS[2]) == 1 then return 'queued' end
if redis.call('EXISTS', KEYS[1]) == 0 then return 'released' end
local rec = redis.call('HMGET', KEYS[1], 'unpublished', 'submitter')
if not rec[1] then return 'queued' end
if redis.call('EXISTS', KEYS[4]) == 1 then return 'queued' end
if rec[1] == ARGV[1] and rec[2] == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('SREM', KEYS[3], ARGV[1])
  redis.call('ZREM', KEYS[5], ARGV[2])
  return 'released'
end
return 'unpublished'
""",
)

WATCH = Script(
    "watch",
    """
-- KEYS: result, job, watchers
-- ARGV: id, waiter, ttl
-- A finished job is 'done' (the waiter reads its result); nothing is pushed for it,
-- but the waiter is registered where Redis has room: if someone retries the job
-- (retry_failed) before the waiter reads the result, the next result wakes it.
local done = redis.call('EXISTS', KEYS[1]) == 1
if not done and redis.call('EXISTS', KEYS[2]) == 0 then return 'unknown' end
if done then
  redis.pcall('SADD', KEYS[3], ARGV[2])
  redis.pcall('EXPIRE', KEYS[3], tonumber(ARGV[3]))
  return 'done'
end
redis.call('SADD', KEYS[3], ARGV[2])
redis.call('EXPIRE', KEYS[3], tonumber(ARGV[3]))
return 'waiting'
""",
)

START = Script(
    "start",
    """
-- KEYS: job, result, owner, running, attempts
-- ARGV: id, owner token, lease ms, ttl, blob key prefix, largest archive returned inline,
--       the task id of the message that started it (or '')
-- A larger archive is left in Redis for the worker to read in pieces ('large').
if redis.call('EXISTS', KEYS[2]) == 1 then return {'done'} end
local rec = redis.call('HMGET', KEYS[1], 'job', 'blob')
if not rec[1] then return {'missing'} end
"""
    + _NOW_MS
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
if ARGV[7] ~= '' then redis.call('HSET', KEYS[1], 'started', ARGV[7]) end
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
    + _NOW_MS
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
-- Lists expired leases as id, batch, the task id that started it; taken by REQUEUE.
"""
    + _NOW_MS
    + """
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local found = {}
for _, id in ipairs(expired) do
  local rec = redis.call('HMGET', ARGV[1] .. id, 'batch', 'started')
  found[#found + 1] = id
  found[#found + 1] = rec[1] or ''
  found[#found + 1] = rec[2] or ''
end
return found
""",
)

REQUEUE = Script(
    "requeue",
    """
-- KEYS: running, owner, job, result, pending
-- ARGV: id, message (or '': claim the lease while the caller publishes elsewhere),
--       its task id, claim token, lease ms, default queue
-- Sends again a job whose lease expired (its worker died): 'requeued' (message at the
-- head), 'claimed', or left alone: 'done', 'gone' (another worker sent it), 'alive'
-- (renewed meanwhile), 'missing' (no record).
redis.call('ZREM', KEYS[1], '')  -- a write that needs no memory: see the module's doc
"""
    + _NOW_MS
    + _PUSH_HEAD
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
push_head(KEYS[3], KEYS[5], id, queue, ARGV[2], ARGV[3], now)
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

RECEIVE = Script(
    "receive",
    """
-- KEYS: job, pending, the queue's watermark
-- ARGV: id, task id, consumer
-- A consumer took the job's latest message from the queue. A message pushed at the
-- tail moves the watermark: every message pushed before it has left the queue too.
local rec = redis.call('HMGET', KEYS[1], 'task', 'pushed', 'head')
if rec[1] ~= ARGV[2] then return 0 end
"""
    + _NOW_MS
    + """
redis.call('HSET', KEYS[1], 'received', ARGV[2], 'holder', ARGV[3])
redis.call('ZADD', KEYS[2], 'XX', now, ARGV[1])
if rec[3] ~= '1' and rec[2] then
  local mark = redis.call('GET', KEYS[3])
  if (not mark) or tonumber(rec[2]) > tonumber(mark) then
    redis.call('SET', KEYS[3], rec[2])
  end
end
return 1
""",
)

RESTORE = Script(
    "restore",
    """
-- KEYS: held list, job, result, running, owner, pending
-- ARGV: the held entry, job id (or '': not a job's message), its task id,
--       new message (or '': push the entry itself), new task id, default queue
-- Gives back one message a consumer held: 'requeued' at the head of the queue when it
-- is still the job's latest and nobody runs the job; otherwise dropped: 'gone' (not
-- held any more), 'dropped' (no job), 'done', 'missing', 'stale' (a newer message was
-- sent), 'running' (a live lease).
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then return 'gone' end
if ARGV[2] == '' then return 'dropped' end
local id = ARGV[2]
if redis.call('EXISTS', KEYS[3]) == 1 then return 'done' end
if redis.call('EXISTS', KEYS[2]) == 0 then return 'missing' end
local rec = redis.call('HMGET', KEYS[2], 'task', 'queue')
if rec[1] and rec[1] ~= ARGV[3] then return 'stale' end
"""
    + _NOW_MS
    + _PUSH_HEAD
    + """
local deadline = redis.call('ZSCORE', KEYS[4], id)
if deadline and tonumber(deadline) > now then return 'running' end
if deadline then  -- an expired lease: this message is the job's next run
  redis.call('ZREM', KEYS[4], id)
  redis.call('DEL', KEYS[5])
end
local message, task = ARGV[4], ARGV[5]
if message == '' then message, task = ARGV[1], ARGV[3] end
push_head(KEYS[2], KEYS[6], id, rec[2] or ARGV[6], message, task, now)
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
    + _NOW_MS
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
    + _NOW_MS
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
    + _NOW_MS
    + """
  if deadline and tonumber(deadline) > now then return 0 end
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
""",
)

RECONCILE = Script(
    "reconcile",
    """
-- KEYS: pending, running, consumers
-- ARGV: most jobs to look at, grace ms, job key prefix, result key prefix,
--       watermark key prefix
-- Looks at the unfinished jobs with no sign of life for a grace period. A job is fine
-- when it has a result or no record (forgotten: it leaves the index), holds a live
-- lease, was taken by a consumer that is registered, or waits in the queue; a fine
-- job is looked at again later (one waiting in a long queue, less and less often).
-- Returns the others as kind, id, task id, batch, publisher:
-- 'lost' (to send again) or 'unpublished' (a submit died before publishing it).
"""
    + _NOW_MS
    + """
local grace = tonumber(ARGV[2])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - grace,
                       'LIMIT', 0, tonumber(ARGV[1]))
local found = {}
local function later(id, at) redis.call('ZADD', KEYS[1], at, id) end
for _, id in ipairs(due) do
  local record = ARGV[3] .. id
  if redis.call('EXISTS', ARGV[4] .. id) == 1 or redis.call('EXISTS', record) == 0 then
    redis.call('ZREM', KEYS[1], id)
  else
    local deadline = redis.call('ZSCORE', KEYS[2], id)
    local rec = redis.call('HMGET', record, 'task', 'pushed', 'head', 'queue', 'received',
                           'holder', 'unpublished', 'batch')
    local task, pushed, queue = rec[1] or '', tonumber(rec[2] or '0'), rec[4]
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
    elseif queue and ((pushed < tonumber(redis.call('GET', ARGV[5] .. queue) or '0'))
                      or redis.call('LLEN', queue) == 0) then
      kind = 'lost'
    else
      later(id, now + math.max(0, now - pushed - grace))  -- waiting in the queue
    end
    if kind then
      found[#found + 1] = kind
      found[#found + 1] = id
      found[#found + 1] = task
      found[#found + 1] = rec[8] or ''
      found[#found + 1] = rec[7] or ''
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
-- KEYS: job, result, running, pending
-- ARGV: id, the task id the reconciler saw (or ''), message, its task id, default queue
-- Sends again a job whose message was lost, unless something happened to it since.
if redis.call('EXISTS', KEYS[2]) == 1 then return 'done' end
if redis.call('EXISTS', KEYS[1]) == 0 then return 'missing' end
local rec = redis.call('HMGET', KEYS[1], 'task', 'queue')
if (rec[1] or '') ~= ARGV[2] then return 'changed' end
"""
    + _NOW_MS
    + _PUSH_HEAD
    + """
local deadline = redis.call('ZSCORE', KEYS[3], ARGV[1])
if deadline and tonumber(deadline) > now then return 'running' end
push_head(KEYS[1], KEYS[4], ARGV[1], rec[2] or ARGV[5], ARGV[3], ARGV[4], now)
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
    + _NOW_MS
    + """
redis.call('ZADD', KEYS[2], now, ARGV[1])
return 1
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

ALL = (
    SUBMIT,
    PUBLISHED,
    RELEASE,
    WATCH,
    START,
    HEARTBEAT,
    REAP,
    REQUEUE,
    LET_GO,
    RECEIVE,
    RESTORE,
    CONSUMERS,
    DEAD_CONSUMERS,
    FORGET_CONSUMER,
    RECONCILE,
    REPUBLISH,
    CLAIM_UNPUBLISHED,
    FINISH,
)
"""Every script, for loading them all at once after Redis lost its script cache."""
