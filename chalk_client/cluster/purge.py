"""Purging: a job that has not started ends ``failed``, and its waiters are told.

See ``chalk_client.cli.purge`` for the operator's command.
"""

from __future__ import annotations

from chalk_client.cluster import keys
from chalk_client.cluster.keys import DONE_TTL_S
from chalk_client.cluster.script import Pipeline, Script, queue_script

PURGE = Script(
    "purge",
    """
-- KEYS: job, result, watchers, pending
-- ARGV: id, failed result json, result ttl, done-list key prefix
local rec = redis.call('HMGET', KEYS[1], 'submitted', 'owner', 'submitter', 'status')
if redis.call('EXISTS', KEYS[2]) == 1 or rec[4] then return 'done' end
if not rec[1] then return 'missing' end
if rec[2] and rec[2] ~= '' then return 'running' end
redis.call('SET', KEYS[2], ARGV[2], 'EX', tonumber(ARGV[3]))
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('HSET', KEYS[1], 'status', 'failed')
local function tell(waiter)
  if redis.call('RPUSH', ARGV[4] .. waiter, ARGV[1]) == 1 then
    redis.call('EXPIRE', ARGV[4] .. waiter, DONE_TTL_S)
  end
end
tell(rec[3])
for _, waiter in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  if waiter ~= rec[3] then tell(waiter) end
end
redis.call('DEL', KEYS[3])
return 'purged'
""".replace("DONE_TTL_S", str(DONE_TTL_S)),
)


def queue_purge(pipe: Pipeline, job_id: str, failed_json: str, ttl_s: int) -> None:
    """Queue purging one job: its result ``failed_json``, unless it started or finished."""
    queue_script(
        pipe,
        PURGE,
        [keys.job(job_id), keys.result(job_id), keys.watchers(job_id), keys.PENDING],
        [job_id, failed_json, ttl_s, keys.DONE_PREFIX],
    )
