"""``chalk purge``: take jobs that have not started off the cluster, and say so to their waiters.

A purged job ends with a ``failed`` result saying it was purged before it ran,
so everyone waiting on it wakes up, ``chalk status`` counts it, and ``chalk
retry --failed BATCH`` (or ``submit(..., retry_failed=True)``) scores it later.
A job that a worker is scoring, or that has a result, is left alone.

- ``purge_queue`` empties the broker queue: every message is taken, its job
  purged, and the message dropped only then. With Redis as the broker it takes
  from the lanes as a worker does (``chalk_client.cluster.lanes``); with another
  broker, through kombu (which restores what it took if the purge stops halfway).
- ``purge_batch`` purges a batch's jobs where they are: their messages stay in
  the queue, and a worker drops each one when it comes (the job has a result).
"""

from __future__ import annotations

import os
import socket
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kombu import Connection
from kombu.exceptions import OperationalError

from chalk_client.client import ChalkClient
from chalk_client.cluster import keys
from chalk_client.cluster.connection import shown_url
from chalk_client.cluster.lanes import MAX_TAKE, queue_take
from chalk_client.cluster.messages import HeldEntry, task_queue
from chalk_client.cluster.purge import queue_purge
from chalk_client.cluster.script import (
    Pipeline,
    as_bytes,
    as_list,
    as_text,
    first_error,
    run_pipeline,
)
from chalk_client.errors import QueueError, QueueUnavailableError
from chalk_client.jobs import JobResult, JobStatus
from chalk_client.store_errors import reaching

PURGED_ERROR = (
    "purged by an operator (chalk purge) before it ran; score it again with "
    "`chalk retry --failed BATCH` or submit it with retry_failed=True"
)
CHUNK = 200
"""Messages taken, and jobs purged, per round trip."""


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

        def build(pipe: Pipeline, part: Sequence[str] = part) -> None:
            for job_id in part:
                failed = JobResult(
                    job_id=job_id, status=JobStatus.FAILED, error=PURGED_ERROR, attempts=0
                )
                queue_purge(pipe, job_id, failed.model_dump_json(), ttl)

        with reaching(client.redis_url):
            replies = run_pipeline(client.store.redis, build)
            error = first_error(replies)
            if error is not None:
                raise error
            outcomes.update(as_text(reply) for reply in replies)
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
    if broker_url == client.redis_url:
        return _purge_lanes(client)
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


def _purge_lanes(client: ChalkClient) -> PurgeReport:
    """Empty a Redis broker's queue: its lanes, as workers take from them, a chunk at a
    time into a held list of the purge's own, each chunk's jobs purged, then dropped.
    A purge stopped halfway leaves the taken jobs to the reconciler, which sends them
    again."""
    queue = client.settings.queue
    consumer = keys.consumer_id(queue, f"purge@{socket.gethostname()}", os.getpid(), "p", 0)
    outcomes: Counter[str] = Counter()
    taken = 0
    redis = client.store.redis
    with reaching(client.redis_url):
        while True:

            def build(pipe: Pipeline) -> None:
                for _ in range(0, CHUNK, MAX_TAKE):
                    queue_take(pipe, queue, consumer, count=MAX_TAKE)

            replies = run_pipeline(redis, build)
            error = first_error(replies)
            if error is not None:
                raise error
            messages = [as_bytes(message) for reply in replies for message in as_list(reply)]
            if not messages:
                break
            taken += len(messages)
            ids = [entry.job_id for entry in map(HeldEntry.parse, messages) if entry.job_id]
            outcomes.update(purge_jobs(client, ids))
            redis.delete(keys.held(consumer))
    return PurgeReport(outcomes, messages=taken)
