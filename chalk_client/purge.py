"""``chalk purge``: take jobs that have not started off the cluster, and say so to their waiters.

A purged job ends with a ``failed`` result saying it was purged before it ran,
so everyone waiting on it wakes up, ``chalk status`` counts it, and ``chalk
retry --failed BATCH`` (or ``submit(..., retry_failed=True)``) scores it later.
A job that a worker is scoring, or that has a result, is left alone.

- ``purge_queue`` empties the broker queue: every message is taken (through
  kombu, so any broker works), its job purged, and the message acknowledged only
  then; a purge stopped halfway loses nothing (kombu restores what it took).
- ``purge_batch`` purges a batch's jobs where they are: their messages stay in
  the queue, and a worker drops each one when it comes (the job has a result).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kombu import Connection
from kombu.exceptions import OperationalError

from chalk_client import keys
from chalk_client.broker import task_queue
from chalk_client.client import ChalkClient
from chalk_client.errors import QueueError, QueueUnavailableError
from chalk_client.jobs import JobResult, JobStatus
from chalk_client.scripts import Script
from chalk_client.store import as_text, reaching, run_script, shown_url

PURGED_ERROR = (
    "purged by an operator (chalk purge) before it ran; score it again with "
    "`chalk retry --failed BATCH` or submit it with retry_failed=True"
)
CHUNK = 200
"""Messages taken, and jobs purged, per round trip."""

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
""".replace("DONE_TTL_S", str(keys.DONE_TTL_S)),
)


@dataclass(frozen=True)
class PurgeReport:
    """What a purge did per job: ``purged``, or left alone (``running``, ``done``, ``missing``)."""

    outcomes: Counter[str]
    messages: int = 0
    """Queue entries taken (``purge_queue`` only), messages or not."""

    def render(self, what: str) -> str:
        """One line for ``chalk purge``."""
        counts = self.outcomes
        line = f"{what}: purged {counts['purged']} job(s) that had not started"
        left = [f"{counts[k]} {k}" for k in ("running", "done", "missing") if counts[k]]
        if left:
            line += f"; left alone: {', '.join(left)}"
        if self.messages:
            line += f" ({self.messages} queue entries taken)"
        return line


def purge_jobs(client: ChalkClient, job_ids: Sequence[str]) -> Counter[str]:
    """Purge each job that has neither a result nor a worker; the outcome per job, counted."""
    outcomes: Counter[str] = Counter()
    ttl = client.settings.result_ttl_s
    for start in range(0, len(job_ids), CHUNK):
        part = job_ids[start : start + CHUNK]

        def build(pipe: Any, part: Sequence[str] = part) -> None:
            for job_id in part:
                failed = JobResult(
                    job_id=job_id, status=JobStatus.FAILED, error=PURGED_ERROR, attempts=0
                )
                run_script(
                    pipe,
                    PURGE,
                    [
                        keys.job(job_id),
                        keys.result(job_id),
                        keys.owner(job_id),
                        keys.watchers(job_id),
                        keys.PENDING,
                    ],
                    [job_id, failed.model_dump_json(), ttl, keys.DONE_PREFIX],
                )

        with reaching(client.redis_url):
            client.store.redis.script_load(PURGE.text)  # after a restart Redis forgot it
            pipe = client.store.redis.pipeline(transaction=False)
            build(pipe)
            outcomes.update(as_text(reply) for reply in pipe.execute())
    return outcomes


def purge_batch(client: ChalkClient, batch_id: str) -> PurgeReport:
    """Purge the jobs of ``batch_id`` that have not started; ``QueueError`` if it is unknown."""
    ids = list(dict.fromkeys(client.store.batch_ids(batch_id)))
    if not ids:
        raise QueueError(f"no batch {batch_id!r} in the cluster (never submitted, or expired)")
    return PurgeReport(purge_jobs(client, ids))


def _job_id(message: Any) -> str | None:
    """The job id a ``chalk.score`` message carries, if it is one."""
    if message.headers.get("task") != "chalk.score":
        return None
    try:
        body = message.decode()
    except Exception:  # not JSON, another serializer: not our message
        return None
    if isinstance(body, list) and body and isinstance(body[0], list) and len(body[0]) == 1:
        job_id = body[0][0]
        return job_id if isinstance(job_id, str) else None
    return None


def purge_queue(client: ChalkClient) -> PurgeReport:
    """Empty the broker queue, purging the job of every message in it."""
    settings = client.settings
    broker_url = settings.broker_url or client.redis_url
    outcomes: Counter[str] = Counter()
    taken = 0
    try:
        with Connection(broker_url) as connection:
            queue = task_queue(settings.queue)(connection.default_channel)
            while True:
                messages = []
                for _ in range(CHUNK):
                    try:
                        message = queue.get(no_ack=False, accept=["json"])
                    except ValueError:  # an entry that is not a message: taken, gone
                        taken += 1
                        continue
                    if message is None:
                        break
                    messages.append(message)
                if not messages:
                    break
                taken += len(messages)
                ids = [job_id for job_id in map(_job_id, messages) if job_id is not None]
                outcomes.update(purge_jobs(client, ids))
                for message in messages:
                    message.ack()
    except (OSError, OperationalError) as exc:  # kombu wraps what it could not connect to
        raise QueueUnavailableError(
            f"cannot reach the broker at {shown_url(broker_url)}: {exc}"
        ) from exc
    return PurgeReport(outcomes, messages=taken)
