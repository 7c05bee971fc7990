"""Finishing a job: the workers' script that writes its one result and frees its lease.

The result is written once (``SET NX``), so a job run twice still has one
result; the waiters the job's submitter and watchers named are told, and a job
that succeeded leaves nothing else behind.
"""

from __future__ import annotations

from chalk_client.cluster import keys
from chalk_client.cluster.keys import DONE_TTL_S
from chalk_client.cluster.script import Pipeline, Script, queue_script
from chalk_client.jobs import JobStatus

TELL = """
-- Tell a waiter that job ``id`` finished: its done list (key prefix ``prefix``) gets the
-- id; the list lives DONE_TTL_S after the first id pushed into it. ``tell_watchers``
-- tells every watcher of the set ``watchers`` but ``submitter``, then drops the set.
local function tell(prefix, waiter, id)
  if redis.call('RPUSH', prefix .. waiter, id) == 1 then
    redis.call('EXPIRE', prefix .. waiter, DONE_TTL_S)
  end
end
local function tell_watchers(prefix, watchers, submitter, id)
  for _, waiter in ipairs(redis.call('SMEMBERS', watchers)) do
    if waiter ~= submitter then tell(prefix, waiter, id) end
  end
  redis.call('DEL', watchers)
end
""".replace("DONE_TTL_S", str(DONE_TTL_S))
"""Lua: ``tell`` and ``tell_watchers``, for the scripts that give a job its result."""


FINISH = Script(
    "finish",
    TELL
    + """
-- KEYS: result, running, job, pending, watchers
-- ARGV: id, result json, result ttl, owner token, done-list key prefix, status,
--       '1' to keep the record of a job that succeeded, blob key prefix, blob-ref prefix
-- Writes the one result, frees the lease, tells the waiters; a job that succeeded
-- leaves nothing else (its record goes, and its archive with the last job using it).
-- The first write (ZREM) needs no memory, so a finish runs whole on a full Redis.
-- A waiter pops its done list within seconds; one that stopped waiting leaves
-- nothing for long (``TELL``).
redis.call('ZREM', KEYS[4], ARGV[1])
local rec = redis.call('HMGET', KEYS[3], 'owner', 'submitter', 'watched', 'blob')
if (not rec[1]) or rec[1] == '' or rec[1] == ARGV[4] then
  redis.call('ZREM', KEYS[2], ARGV[1])
end
if not redis.call('SET', KEYS[1], ARGV[2], 'NX', 'EX', tonumber(ARGV[3])) then return 0 end
if rec[2] then tell(ARGV[5], rec[2], ARGV[1]) end
if rec[3] or not rec[2] then tell_watchers(ARGV[5], KEYS[5], rec[2], ARGV[1]) end
if not rec[2] then return 1 end
if ARGV[6] == 'succeeded' and ARGV[7] ~= '1' then
  redis.call('DEL', KEYS[3])
  if rec[4] and rec[4] ~= '' then
    if redis.call('DECR', ARGV[9] .. rec[4]) <= 0 then
      redis.call('DEL', ARGV[8] .. rec[4], ARGV[9] .. rec[4])
    end
  end
else
  redis.call('HSET', KEYS[3], 'status', ARGV[6], 'owner', '')
end
return 1
""",
)


def queue_finish(
    pipe: Pipeline,
    job_id: str,
    result_json: str,
    owner: str,
    *,
    status: JobStatus,
    ttl_s: int,
    keep: bool = False,
) -> None:
    """Queue the finish script: write the one result, free the lease, tell the waiters.

    A job that ``succeeded`` leaves nothing but its result (``keep`` keeps its record).
    """
    queue_script(
        pipe,
        FINISH,
        [keys.result(job_id), keys.RUNNING, keys.job(job_id), keys.PENDING, keys.watchers(job_id)],
        [
            job_id,
            result_json,
            ttl_s,
            owner,
            keys.DONE_PREFIX,
            status.value,
            "1" if keep else "0",
            keys.BLOB_PREFIX,
            keys.BLOBREF_PREFIX,
        ],
    )
