"""The Lua scripts that make the cluster's state changes atomic.

Each script is one step of a job's life that must not interleave with another:
submitting (claim the id, store the record, enqueue, register the waiter),
confirming or releasing a record whose message a separate broker took or refused,
watching, starting (take the lease), renewing leases, reaping expired leases
and finishing (write the one result, tell the waiters). Times come from
Redis's own clock, so workers on machines with skewed clocks agree.
Keys are those of ``chalk_client.keys``; a few are derived inside a script from
a prefix (owners, done lists), which a single Redis allows.
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

SUBMIT = Script(
    "submit",
    """
-- KEYS: job, result, watchers, broker queue, owner
-- ARGV: id, job json, blob digest, job ttl, waiter, message (or ''),
--       retry failed ('1'/'0'), publish ('1': the caller publishes the message itself)
-- A recorded job is 'duplicate', unless its publish never went through (an
-- 'unpublished' record: that submit failed or died); then this caller sends it.
local ttl = tonumber(ARGV[4])
local publishes = ARGV[8] == '1'
local function enqueue()
  if ARGV[6] ~= '' then redis.call('LPUSH', KEYS[4], ARGV[6]) end
end
local function record()
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'job', ARGV[2], 'blob', ARGV[3],
             'submitted', redis.call('TIME')[1], 'submitter', ARGV[5])
  if publishes then redis.call('HSET', KEYS[1], 'unpublished', ARGV[5]) end
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
      enqueue()
    end
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
-- KEYS: job
-- ARGV: waiter
-- The submit whose waiter this is published the job's message: the record is complete.
if redis.call('HGET', KEYS[1], 'unpublished') == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'unpublished')
end
return 1
""",
)

RELEASE = Script(
    "release",
    """
-- KEYS: job, result, watchers, owner
-- ARGV: waiter
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
-- ARGV: id, owner token, lease ms, ttl, blob key prefix, largest archive returned inline
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
-- ARGV: owner key prefix, most ids to reap
"""
    + _NOW_MS
    + """
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('DEL', ARGV[1] .. id)
end
return expired
""",
)

FINISH = Script(
    "finish",
    """
-- KEYS: result, running, owner, watchers
-- ARGV: id, result json, result ttl, owner token, done-list key prefix
-- A done list lives DONE_TTL_S after its last push: its waiter pops it within
-- seconds, and one that stopped waiting leaves nothing for long.
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

ALL = (SUBMIT, PUBLISHED, RELEASE, WATCH, START, HEARTBEAT, REAP, FINISH)
"""Every script, for loading them all at once after Redis lost its script cache."""
