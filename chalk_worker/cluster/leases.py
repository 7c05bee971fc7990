"""The worker's half of the cluster store: take a job's lease, renew it, finish the job.

A job a worker starts gets a lease: its owner token in ``chalk:owner:ID`` and a
deadline in ``chalk:running``. The worker's keeper renews the deadline while
the job runs; any live worker sends again the jobs whose deadline passed (their
worker died): one script checks the lease is still expired, frees it and pushes
the job's new message, so a worker dying halfway leaves the lease to the next
reaper, never a job without a message. The result is written once (``SET NX``),
so a job run twice still has one result.

Some Redis errors pass by themselves, and the worker retries them
(``describe_trouble``). A script Redis refused has changed nothing: over
``maxmemory`` Redis refuses a script at its first write that may need memory,
and lets one that has already written run to its end (a finish by the lease's
holder begins with ``ZREM``, so it runs whole; a start, whose first write is
``SET``, is refused whole); a read-only replica refuses a script's first write.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import redis
from redis.exceptions import BusyLoadingError, OutOfMemoryError, ReadOnlyError

from chalk_client.cluster import keys
from chalk_client.cluster.connection import redacted
from chalk_client.cluster.finish import queue_finish
from chalk_client.cluster.leases import (
    Expired,
    RequeueAnswer,
    Start,
    parse_expired,
    parse_start,
    queue_heartbeat,
    queue_let_go,
    queue_reap,
    queue_requeue,
    queue_start,
)
from chalk_client.cluster.messages import queue_message
from chalk_client.cluster.replicas import split_wait, with_wait
from chalk_client.cluster.script import (
    Build,
    Pipeline,
    as_list,
    as_text,
    first_error,
    parse_kind,
    run_pipeline,
)
from chalk_client.jobs import JobResult
from chalk_client.settings import ChalkSettings
from chalk_worker.cluster import delivery

log = logging.getLogger(__name__)

SHORT_LOG_EVERY_S = 60.0
"""Results stored without the replicas' confirmation are logged at most this often."""
DOWNLOAD_PIECE_BYTES = 1 << 20
"""Bytes read per round trip when copying a large archive out of Redis."""


def describe_trouble(exc: BaseException, url: str, doing: str) -> str | None:
    """What went wrong ``doing`` something with Redis, and what to do, if it passes by itself.

    Those errors are worth retrying: Redis unreachable or slow to answer, loading
    its data after a restart, out of memory (over ``maxmemory`` with
    ``noeviction``, it refuses writes), or a read-only replica (a failover).
    Any other error is ``None``: retrying would not help.
    """
    where = redacted(url)
    if isinstance(exc, OutOfMemoryError):
        return (
            f"Redis at {where} is out of memory (maxmemory) while {doing}: free memory "
            f"(raise maxmemory, shorten CHALK_RESULT_TTL_S/CHALK_JOB_TTL_S, delete old "
            f"results) ({exc})"
        )
    if isinstance(exc, ReadOnlyError):
        return (
            f"Redis at {where} is a read-only replica while {doing}: point CHALK_REDIS_URL "
            f"at the primary (after a failover, the new one) ({exc})"
        )
    if isinstance(exc, BusyLoadingError):
        return f"Redis at {where} is loading its data set while {doing} ({exc})"
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        return f"cannot reach Redis at {where} while {doing} ({exc})"
    return None


class LeaseStore:
    """Start, renew, reap and finish jobs, each step one atomic script (``chalk_client.cluster``).

    Starts and finishes can be queued on a pipeline (``queue_start``, ``queue_finish``)
    so that one round trip serves every job that a process starts or finishes at once.
    """

    def __init__(self, client: redis.Redis, settings: ChalkSettings) -> None:
        self.redis = client
        self.settings = settings
        self.lease_ms = int(settings.lease_s * 1000)
        self._short_lock = threading.Lock()
        self._short_count = 0
        self._short_logged = -SHORT_LOG_EVERY_S

    def _one(self, build: Build) -> object:
        reply = run_pipeline(self.redis, build)[0]
        if isinstance(reply, Exception):
            raise reply
        return reply

    def queue_start(
        self, pipe: Pipeline, job_id: str, owner: str, task_id: str = "", node: str = ""
    ) -> None:
        """Queue the start script of ``job_id`` (see ``chalk_client.cluster.leases``)."""
        queue_start(
            pipe,
            job_id,
            owner,
            lease_ms=self.lease_ms,
            task_id=task_id,
            node=node,
            mark_taken=not delivery.NOTE_RECEIPTS,
        )

    def queue_finish(self, pipe: Pipeline, result: JobResult, owner: str) -> None:
        """Queue the finish script of ``result``'s job."""
        queue_finish(
            pipe,
            result.job_id,
            result.model_dump_json(),
            owner,
            status=result.status,
            ttl_s=self.settings.result_ttl_s,
            keep=self.settings.keep_jobs,
        )

    def start(self, job_id: str, owner: str, task_id: str = "", node: str = "") -> Start:
        """Take the job's lease (counting an attempt) and read its record and archive."""
        return parse_start(
            self._one(lambda pipe: self.queue_start(pipe, job_id, owner, task_id, node))
        )

    def download(self, digest: str, path: Path) -> bool:
        """Copy a stored archive to ``path`` in pieces (``False`` if it is gone).

        A large archive never sits whole in this process's memory: a single reply
        would be held twice, by the reader's buffer and by the reply itself.
        """
        key = keys.blob(digest)
        size = int(self.redis.strlen(key))
        if size == 0:
            return False
        with open(path, "wb") as out:
            for start in range(0, size, DOWNLOAD_PIECE_BYTES):
                piece = self.redis.getrange(key, start, start + DOWNLOAD_PIECE_BYTES - 1)
                if not isinstance(piece, bytes) or not piece:
                    return False
                out.write(piece)
        return path.stat().st_size == size

    def finish(self, result: JobResult, owner: str) -> bool:
        """Write the job's one result and tell its waiters; ``False`` if it already had one.

        With ``CHALK_REDIS_WAIT_REPLICAS``, returns once that many replicas have the
        result, or the wait timed out (logged: a failover may then cost the result).
        """
        replies = run_pipeline(
            self.redis,
            lambda pipe: with_wait(
                lambda pipe: self.queue_finish(pipe, result, owner), self.settings, pipe
            ),
        )
        replies, short = split_wait(replies, self.settings)
        if isinstance(replies[0], Exception):
            raise replies[0]
        if short is not None:
            self._short_of_replicas(result.job_id, short)
        return bool(replies[0])

    def finish_many(self, results: Sequence[JobResult], owner: str) -> list[bool | Exception]:
        """``finish`` for many jobs in one round trip: per job, whether its result was
        written (``False``: it already had one) or the error its script met. A lost
        connection raises, as ``finish`` does."""
        replies = run_pipeline(
            self.redis,
            lambda pipe: with_wait(
                lambda pipe: self._queue_finishes(pipe, results, owner), self.settings, pipe
            ),
        )
        replies, short = split_wait(replies, self.settings)
        if short is not None:
            self._short_of_replicas(results[0].job_id, short)
        return [reply if isinstance(reply, Exception) else bool(reply) for reply in replies]

    def _queue_finishes(self, pipe: Pipeline, results: Sequence[JobResult], owner: str) -> None:
        for result in results:
            self.queue_finish(pipe, result, owner)

    def _short_of_replicas(self, job_id: str, short: str) -> None:
        """Log a result the replicas did not confirm: the first, then a count a minute."""
        now = time.monotonic()
        with self._short_lock:
            self._short_count += 1
            if now - self._short_logged < SHORT_LOG_EVERY_S:
                return
            count, self._short_count, self._short_logged = self._short_count, 0, now
        more = f" (and {count - 1} more result(s) since the last such message)" * (count > 1)
        log.warning("the result of job %s is stored, but %s%s", job_id, short, more)

    def heartbeat(self, job_ids: Sequence[str], owner: str) -> list[str]:
        """Renew the leases of ``job_ids``; returns those no longer ours."""
        if not job_ids:
            return []
        lost = self._one(lambda pipe: queue_heartbeat(pipe, job_ids, owner, self.lease_ms))
        return [as_text(job_id) for job_id in as_list(lost)]

    def reap(self) -> list[Expired]:
        """The leases that ran out (their worker stopped renewing them); ``requeue`` takes them."""
        return parse_expired(self._one(queue_reap))

    def requeue(
        self, expired: Sequence[Expired], queue: str
    ) -> list[tuple[Expired, RequeueAnswer, str]]:
        """Send each expired job again: a new message at the head of its queue (``queue``
        for jobs that name none), in the same script that frees the lease if still expired.

        Returns each job with the script's answer, ``requeued`` or why it was left
        alone (``done``, ``gone``: another worker sent it, ``alive``, ``missing``),
        and the new message's task id.
        """
        messages = [
            queue_message(one.job_id, one.queue or queue, one.batch or None) for one in expired
        ]

        def build(pipe: Pipeline) -> None:
            for one, message in zip(expired, messages, strict=True):
                queue_requeue(
                    pipe,
                    one.job_id,
                    message.text,
                    message.task_id,
                    token="",
                    lease_ms=self.lease_ms,
                    queue=queue,
                )

        return [
            (one, answer, message.task_id)
            for (one, answer), message in zip(self._answers(expired, build), messages, strict=True)
        ]

    def claim_expired(
        self, expired: Sequence[Expired], token: str
    ) -> list[tuple[Expired, RequeueAnswer]]:
        """Take over expired leases while their jobs are published through another broker.

        Returns each job with ``claimed`` (publish it, then ``let_go``) or why not.
        """

        def build(pipe: Pipeline) -> None:
            for one in expired:
                queue_requeue(
                    pipe,
                    one.job_id,
                    "",
                    "",
                    token=token,
                    lease_ms=self.lease_ms,
                    queue=self.settings.queue,
                )

        return self._answers(expired, build)

    def let_go(self, job_id: str, token: str) -> None:
        """Give up a lease taken by ``claim_expired`` once the job's message went out."""
        self._one(lambda pipe: queue_let_go(pipe, job_id, token))

    def _answers(
        self, expired: Sequence[Expired], build: Build
    ) -> list[tuple[Expired, RequeueAnswer]]:
        if not expired:
            return []
        replies = run_pipeline(self.redis, build)
        error = first_error(replies)
        if error is not None:
            raise error
        return [
            (one, parse_kind(RequeueAnswer, reply))
            for one, reply in zip(expired, replies, strict=True)
        ]
