"""Purging: a job that has not started ends ``failed``, and its waiters are told.

See ``chalk_client.purge`` for the operator's command.
"""

from __future__ import annotations

from chalk_client.cluster import keys
from chalk_client.cluster.keys import DONE_TTL_S
from chalk_client.cluster.script import Pipeline, Script, queue_script

PURGE = Script(
    "purge",
    """
-- KEYS: job, result, owner, watchers, pending
-- ARGV: id, failed result json, result ttl, done-list key prefix
if redis.call('EXISTS', KEYS[2]) == 1 then return 'done' end
if redis.call('EXISTS', KEYS[1]) == 0 then return 'missing' end
if redis.call('EXISTS', KEYS[3]) == 1 then return 'running' end
local ttl = tonumber(ARGV[3])
redis.call('SET', KEYS[2], ARGV[2], 'EX', ttl)
redis.call('ZREM', KEYS[5], ARGV[1])
for _, waiter in ipairs(redis.call('SMEMBERS', KEYS[4])) do
  redis.call('RPUSH', ARGV[4] .. waiter, ARGV[1])
  redis.call('EXPIRE', ARGV[4] .. waiter, DONE_TTL_S)
end
redis.call('DEL', KEYS[4])
return 'purged'
""".replace("DONE_TTL_S", str(DONE_TTL_S)),
)


def queue_purge(pipe: Pipeline, job_id: str, failed_json: str, ttl_s: int) -> None:
    """Queue purging one job: its result ``failed_json``, unless it started or finished."""
    queue_script(
        pipe,
        PURGE,
        [
            keys.job(job_id),
            keys.result(job_id),
            keys.owner(job_id),
            keys.watchers(job_id),
            keys.PENDING,
        ],
        [job_id, failed_json, ttl_s, keys.DONE_PREFIX],
    )
