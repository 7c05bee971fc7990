"""Cancelling a batch: the client's scripts (the workers' half: ``chalk_worker.cluster.cancel``).

Cancelling drops the batch's waiting messages with their tokens, then gives each
of its unfinished jobs its one result, ``cancelled``, written once as finishing
writes it (``SET NX``: a result already written stays, and a worker's later
finish changes nothing), frees its lease and tells its waiters. A worker
notices within a second that a job it runs has a result and stops it: its
scripts killed, its LLM calls abandoned.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from chalk_client.cluster import keys
from chalk_client.cluster.finish import TELL
from chalk_client.cluster.lanes import TOKEN, Rank
from chalk_client.cluster.script import Pipeline, Script, parse_kind, queue_script
from chalk_client.jobs import JobResult, JobStatus

DROP_WAITING = Script(
    "drop-waiting",
    """
-- KEYS: the queue's list
-- ARGV: the batch's lanes...
-- Drops the messages waiting in a batch's lanes, with as many tokens. Returns how many
-- messages were dropped. (Its lanes leave their rings when a worker finds them empty.)
local dropped = 0
for i = 1, #ARGV do
  local n = redis.call('LLEN', ARGV[i])
  if n > 0 then
    dropped = dropped + n
    redis.call('DEL', ARGV[i])
  end
end
if dropped > 0 then redis.call('LREM', KEYS[1], dropped, 'TOKEN') end
return dropped
""".replace("TOKEN", TOKEN),
)


CANCEL = Script(
    "cancel",
    TELL
    + """
-- KEYS: result, running, job, pending, watchers
-- ARGV: id, cancelled result json, result ttl, done-list key prefix
-- Gives an unfinished job its result, cancelled: 'queued' (it had not started),
-- 'running' (a worker runs it: it stops it); or leaves it: 'done' (it has a result),
-- 'missing' (no record). The first write (ZREM) needs no memory: a full Redis cancels.
redis.call('ZREM', KEYS[4], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 1 then return 'done' end
local rec = redis.call('HMGET', KEYS[3], 'submitted', 'owner', 'submitter', 'watched', 'status')
if not rec[1] then return 'missing' end
if rec[5] then return 'done' end
local running = rec[2] and rec[2] ~= '' and redis.call('ZSCORE', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('SET', KEYS[1], ARGV[2], 'EX', tonumber(ARGV[3]))
redis.call('HSET', KEYS[3], 'status', 'cancelled', 'owner', '')
if rec[3] then tell(ARGV[4], rec[3], ARGV[1]) end
tell_watchers(ARGV[4], KEYS[5], rec[3], ARGV[1])
if running then return 'running' end
return 'queued'
""",
)


def cancelled_result(job_id: str, batch_id: str) -> JobResult:
    """The result a job of the cancelled batch ``batch_id`` gets."""
    return JobResult(
        job_id=job_id,
        status=JobStatus.CANCELLED,
        error=(
            f"cancelled: batch {batch_id} was cancelled before this job finished; "
            "submit it again with retry_failed=True (or chalk retry --failed) to score it"
        ),
        attempts=0,
    )


class CancelOutcome(StrEnum):
    """What cancelling did to one job."""

    QUEUED = "queued"
    """It had not started: it never will."""
    RUNNING = "running"
    """A worker was scoring it: the worker stops it."""
    DONE = "done"
    """It already had a result, which stays."""
    MISSING = "missing"
    """No record of it (expired)."""


@dataclass(frozen=True)
class CancelReport:
    """What cancelling a batch did: its jobs by ``CancelOutcome``."""

    batch_id: str
    outcomes: Counter[CancelOutcome] = field(default_factory=Counter)
    dropped_messages: int = 0
    """Messages taken off the queue (those of jobs that had not started)."""

    @property
    def cancelled(self) -> int:
        """Jobs that end ``cancelled`` by this call."""
        return self.outcomes[CancelOutcome.QUEUED] + self.outcomes[CancelOutcome.RUNNING]

    def render(self) -> str:
        """One line, as ``chalk cancel`` prints it."""
        counts = self.outcomes
        total = sum(counts.values())
        if not self.cancelled:
            return (
                f"batch {self.batch_id}: nothing to cancel, all {total} job(s) already "
                "have a result"
                + (
                    f" or expired ({counts[CancelOutcome.MISSING]})"
                    if counts[CancelOutcome.MISSING]
                    else ""
                )
            )
        line = (
            f"batch {self.batch_id}: cancelled {self.cancelled} of {total} job(s): "
            f"{counts[CancelOutcome.QUEUED]} waiting (they will not start)"
        )
        if counts[CancelOutcome.RUNNING]:
            line += f", {counts[CancelOutcome.RUNNING]} running (stopped within 2 s)"
        if counts[CancelOutcome.DONE]:
            line += f"; {counts[CancelOutcome.DONE]} already had a result (kept)"
        if counts[CancelOutcome.MISSING]:
            line += f"; {counts[CancelOutcome.MISSING]} expired"
        return line


def batch_lanes(queue: str, batch_id: str) -> list[str]:
    """The lanes a batch's messages can wait in, one per priority."""
    return [keys.lane(queue, rank, batch_id) for rank in Rank]


def queue_drop_waiting(pipe: Pipeline, queue: str, batch_id: str) -> None:
    """Queue dropping the batch's waiting messages."""
    queue_script(pipe, DROP_WAITING, [queue], batch_lanes(queue, batch_id))


def queue_cancel(
    pipe: Pipeline, job_ids: Sequence[str], result_json: dict[str, str], ttl_s: int
) -> None:
    """Queue cancelling each job, ``result_json[id]`` its result."""
    for job_id in job_ids:
        queue_script(
            pipe,
            CANCEL,
            [
                keys.result(job_id),
                keys.RUNNING,
                keys.job(job_id),
                keys.PENDING,
                keys.watchers(job_id),
            ],
            [job_id, result_json[job_id], ttl_s, keys.DONE_PREFIX],
        )


def parse_cancel(reply: object) -> CancelOutcome:
    """What the cancel script did with one job."""
    return parse_kind(CancelOutcome, reply)
