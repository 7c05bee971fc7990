"""Purging: a job that has not started ends ``failed``, and its waiters are told.

See ``chalk_client.cli.purge`` for the operator's command.
"""

from __future__ import annotations

from chalk_client.cluster import keys
from chalk_client.cluster.finish import TELL
from chalk_client.cluster.script import Pipeline, Script, queue_script

PURGE = Script(
    "purge",
    TELL
    + """
-- KEYS: job, result, watchers, pending
-- ARGV: id, failed result json, result ttl, done-list key prefix
local rec = redis.call('HMGET', KEYS[1], 'submitted', 'owner', 'submitter', 'status')
if redis.call('EXISTS', KEYS[2]) == 1 or rec[4] then return 'done' end
if not rec[1] then return 'missing' end
if rec[2] and rec[2] ~= '' then return 'running' end
redis.call('SET', KEYS[2], ARGV[2], 'EX', tonumber(ARGV[3]))
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('HSET', KEYS[1], 'status', 'failed')
tell(ARGV[4], rec[3], ARGV[1])
tell_watchers(ARGV[4], KEYS[3], rec[3], ARGV[1])
return 'purged'
""",
)


def queue_purge(pipe: Pipeline, job_id: str, failed_json: str, ttl_s: int) -> None:
    """Queue purging one job: its result ``failed_json``, unless it started or finished."""
    queue_script(
        pipe,
        PURGE,
        [keys.job(job_id), keys.result(job_id), keys.watchers(job_id), keys.PENDING],
        [job_id, failed_json, ttl_s, keys.DONE_PREFIX],
    )
