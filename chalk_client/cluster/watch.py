"""Waiting on jobs and reading where they are: waiters, job states, clearing a finished job.

A waiter registers on the jobs it waits for (``WATCH``): the worker that
finishes one pushes its id to the waiter's list. ``JobState`` is what a
client reads of an unfinished job. ``CLEAR_FINISHED`` removes a finished
job's result and record so that the next submit scores it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from chalk_client.cluster import keys
from chalk_client.cluster.script import Pipeline, Script, as_int, queue_script
from chalk_client.settings import ChalkSettings

WATCH = Script(
    "watch",
    """
-- KEYS: result, job, watchers
-- ARGV: id, waiter, ttl
-- A finished job is 'done' (the waiter reads its result); nothing is pushed for it,
-- but the waiter is registered where Redis has room: if someone retries the job
-- (retry_failed) before the waiter reads the result, the next result wakes it.
local done = redis.call('EXISTS', KEYS[1]) == 1
local recorded = redis.call('EXISTS', KEYS[2]) == 1
if not done and not recorded then return 'unknown' end
local call = done and redis.pcall or redis.call
call('SADD', KEYS[3], ARGV[2])
call('EXPIRE', KEYS[3], tonumber(ARGV[3]))
if recorded then call('HSET', KEYS[2], 'watched', '1') end
if done then return 'done' end
return 'waiting'
""",
)


CLEAR_FINISHED = Script(
    "clear-finished",
    """
-- KEYS: result, job
-- ARGV: blob-ref key prefix
-- Clears a finished job's result and record so that the next submit scores it again:
-- 'running' (a worker holds the job: left alone), 'none' (no result), or 'cleared'.
local rec = redis.call('HMGET', KEYS[2], 'owner', 'blob')
if rec[1] and rec[1] ~= '' then return 'running' end
if redis.call('EXISTS', KEYS[1]) == 0 then return 'none' end
redis.call('DEL', KEYS[1], KEYS[2])
if rec[2] and rec[2] ~= '' then redis.call('DECR', ARGV[1] .. rec[2]) end
return 'cleared'
""",
)


def queue_watches(
    pipe: Pipeline, job_ids: Sequence[str], waiter: str, settings: ChalkSettings
) -> None:
    """Queue ``queue_watch`` for each job."""
    for job_id in job_ids:
        queue_watch(pipe, job_id, waiter, settings)


def queue_watch(pipe: Pipeline, job_id: str, waiter: str, settings: ChalkSettings) -> None:
    """Queue the watch script: the waiter hears of the job when it finishes (or now, if it has)."""
    queue_script(
        pipe,
        WATCH,
        [keys.result(job_id), keys.job(job_id), keys.watchers(job_id)],
        [job_id, waiter, settings.result_ttl_s],
    )


@dataclass(frozen=True)
class JobState:
    """Where a job is: known (else never submitted, or expired), leased, tried, finished.

    A job that succeeds loses its record in the same step that writes its result:
    a job read as unfinished a moment ago may be ``finished`` now (read its result).
    """

    recorded: bool
    running: bool
    attempts: int
    finished: bool = False


def queue_states(pipe: Pipeline, job_ids: Sequence[str]) -> None:
    """Queue, per job, the four reads ``parse_states`` turns into a ``JobState``."""
    for job_id in job_ids:
        pipe.exists(keys.job(job_id))
        pipe.zscore(keys.RUNNING, job_id)
        pipe.hget(keys.job(job_id), "attempts")
        pipe.exists(keys.result(job_id))


def parse_states(replies: Sequence[object]) -> list[JobState]:
    """The ``JobState`` of each job from the replies of ``queue_states``."""
    return [
        JobState(
            recorded=bool(replies[i]) or bool(replies[i + 3]),
            running=replies[i + 1] is not None,
            attempts=as_int(replies[i + 2] or 0),
            finished=bool(replies[i + 3]),
        )
        for i in range(0, len(replies), 4)
    ]


def queue_clear_finished(pipe: Pipeline, job_id: str) -> None:
    """Queue clearing a finished job so that it is scored again (``chalk score --rescore``)."""
    queue_script(
        pipe, CLEAR_FINISHED, [keys.result(job_id), keys.job(job_id)], [keys.BLOBREF_PREFIX]
    )
