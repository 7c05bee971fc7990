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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from redis.exceptions import BusyLoadingError, NoScriptError, OutOfMemoryError, ReadOnlyError

from chalk_client import keys
from chalk_client.broker import queue_message
from chalk_client.jobs import JobResult
from chalk_client.scripts import ALL, FINISH, HEARTBEAT, LET_GO, REAP, REQUEUE, START, Script
from chalk_client.settings import ChalkSettings
from chalk_client.store import merge_replies, redacted, run_script

INLINE_ARCHIVE_BYTES = 1 << 20
"""Archives up to this size come back with the lease; larger ones are read in pieces."""
DOWNLOAD_PIECE_BYTES = 1 << 20
"""Bytes read per round trip when copying a large archive out of Redis."""

REAP_BATCH = 100
"""Most expired leases one reap takes."""


@dataclass(frozen=True)
class Start:
    """What ``LeaseStore.start`` found.

    ``outcome`` is ``start`` (the lease is ours: score the job), ``done`` (it has
    a result), ``busy`` (another worker holds a live lease) or ``missing`` (no
    record: never submitted, or expired).
    """

    outcome: str
    attempts: int = 0
    record: bytes = b""
    blob: str = "none"
    """``none`` (no submission), ``ok``, ``large`` (read it with ``download``) or
    ``missing`` (the archive expired)."""
    archive: bytes | None = None
    digest: str = ""
    """The archive's content hash, for ``large`` and ``missing``."""
    holder: str = ""


@dataclass(frozen=True)
class Expired:
    """A lease that ran out: the job, its batch (or ``""``) and the task id that started it."""

    job_id: str
    batch: str
    started: str


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


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class LeaseStore:
    """Start, renew, reap and finish jobs, each step one atomic script.

    Starts and finishes are queued on a pipeline (``queue_start``, ``queue_finish``)
    so that one round trip serves every job that a process starts or finishes at once.
    """

    def __init__(self, client: redis.Redis, settings: ChalkSettings) -> None:
        self.redis = client
        self.settings = settings
        self.lease_ms = int(settings.lease_s * 1000)
        self.keep_s = settings.job_ttl_s

    def pipeline(self, build: Callable[[Any], object]) -> list[Any]:
        """Run what ``build`` queues in one round trip; per-command errors are returned.

        Scripts Redis has forgotten (a restart, ``SCRIPT FLUSH``) are loaded and
        the pipeline run again; connection errors are raised.
        """
        pipe = self.redis.pipeline(transaction=False)
        build(pipe)
        replies: list[Any] = pipe.execute(raise_on_error=False)
        if any(isinstance(reply, NoScriptError) for reply in replies):
            for script in ALL:
                self.redis.script_load(script.text)
            pipe = self.redis.pipeline(transaction=False)
            build(pipe)
            replies = merge_replies(replies, pipe.execute(raise_on_error=False))
        return replies

    def _run(self, script: Script, keys_: Sequence[str], args: Sequence[Any]) -> Any:
        reply = self.pipeline(lambda pipe: run_script(pipe, script, keys_, args))[0]
        if isinstance(reply, Exception):
            raise reply
        return reply

    def queue_start(self, pipe: Any, job_id: str, owner: str, task_id: str = "") -> None:
        """Queue the start script: take the job's lease, count an attempt, read its record.

        ``task_id`` is the message's, recorded on the job (for the lost-attempt report
        should this worker die).
        """
        run_script(
            pipe,
            START,
            [
                keys.job(job_id),
                keys.result(job_id),
                keys.owner(job_id),
                keys.RUNNING,
                keys.attempts(job_id),
            ],
            [
                job_id,
                owner,
                self.lease_ms,
                self.keep_s,
                keys.BLOB_PREFIX,
                INLINE_ARCHIVE_BYTES,
                task_id,
            ],
        )

    @staticmethod
    def parse_start(reply: Any) -> Start:
        """The ``Start`` a start script's reply describes."""
        outcome = _text(reply[0])
        if outcome == "busy":
            return Start(outcome, holder=_text(reply[1]))
        if outcome != "start":
            return Start(outcome)
        blob = _text(reply[3])
        if blob == "ok":
            return Start(outcome, int(reply[1]), reply[2], blob, reply[4])
        return Start(outcome, int(reply[1]), reply[2], blob, None, _text(reply[4]))

    def queue_finish(self, pipe: Any, result: JobResult, owner: str) -> None:
        """Queue the finish script: write the one result, free the lease, tell the waiters."""
        job_id = result.job_id
        run_script(
            pipe,
            FINISH,
            [
                keys.result(job_id),
                keys.RUNNING,
                keys.owner(job_id),
                keys.watchers(job_id),
                keys.PENDING,
            ],
            [job_id, result.model_dump_json(), self.settings.result_ttl_s, owner, keys.DONE_PREFIX],
        )

    def start(self, job_id: str, owner: str, task_id: str = "") -> Start:
        """Take the job's lease (counting an attempt) and read its record and archive."""
        reply = self.pipeline(lambda pipe: self.queue_start(pipe, job_id, owner, task_id))[0]
        if isinstance(reply, Exception):
            raise reply
        return self.parse_start(reply)

    def download(self, digest: str, path: Path) -> bool:
        """Copy a stored archive to ``path`` in pieces (``False`` if it is gone).

        A large archive never sits whole in this process's memory: a single reply
        would be held twice, by the reader's buffer and by the reply itself.
        """
        key = keys.BLOB_PREFIX + digest
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
        """Write the job's one result and tell its waiters; ``False`` if it already had one."""
        reply = self.pipeline(lambda pipe: self.queue_finish(pipe, result, owner))[0]
        if isinstance(reply, Exception):
            raise reply
        return bool(reply)

    def heartbeat(self, job_ids: Sequence[str], owner: str) -> list[str]:
        """Renew the leases of ``job_ids``; returns those no longer ours."""
        if not job_ids:
            return []
        lost = self._run(
            HEARTBEAT,
            [keys.RUNNING],
            [owner, self.lease_ms, keys.OWNER_PREFIX, keys.RESULT_PREFIX, *job_ids],
        )
        return [_text(job_id) for job_id in lost]

    def reap(self) -> list[Expired]:
        """The leases that ran out (their worker stopped renewing them); ``requeue`` takes them."""
        found = self._run(REAP, [keys.RUNNING], [keys.JOB_PREFIX, REAP_BATCH])
        return [
            Expired(_text(found[i]), _text(found[i + 1]), _text(found[i + 2]))
            for i in range(0, len(found), 3)
        ]

    def requeue(self, expired: Sequence[Expired], queue: str) -> list[tuple[Expired, str, str]]:
        """Send each expired job again: a new message at the head of ``queue`` (a Redis
        broker), in the same script that frees the lease if it is still expired.

        Returns each job with the script's answer, ``requeued`` or why it was left
        alone (``done``, ``gone``: another worker sent it, ``alive``, ``missing``),
        and the new message's task id.
        """
        messages = [queue_message(one.job_id, queue, one.batch or None) for one in expired]

        def build(pipe: Any) -> None:
            for one, message in zip(expired, messages, strict=True):
                self._queue_requeue(pipe, one.job_id, message.text, message.task_id, "", queue)

        return [
            (one, answer, message.task_id)
            for (one, answer), message in zip(self._answers(expired, build), messages, strict=True)
        ]

    def claim_expired(self, expired: Sequence[Expired], token: str) -> list[tuple[Expired, str]]:
        """Take over expired leases while their jobs are published through another broker.

        Returns each job with ``claimed`` (publish it, then ``let_go``) or why not.
        """

        def build(pipe: Any) -> None:
            for one in expired:
                self._queue_requeue(pipe, one.job_id, "", "", token, self.settings.queue)

        return self._answers(expired, build)

    def let_go(self, job_id: str, token: str) -> None:
        """Give up a lease taken by ``claim_expired`` once the job's message went out."""
        self._run(LET_GO, [keys.RUNNING, keys.owner(job_id)], [job_id, token])

    def _queue_requeue(
        self, pipe: Any, job_id: str, message: str, task_id: str, token: str, queue: str
    ) -> None:
        run_script(
            pipe,
            REQUEUE,
            [keys.RUNNING, keys.owner(job_id), keys.job(job_id), keys.result(job_id), keys.PENDING],
            [job_id, message, task_id, token, self.lease_ms, queue],
        )

    def _answers(
        self, expired: Sequence[Expired], build: Callable[[Any], object]
    ) -> list[tuple[Expired, str]]:
        if not expired:
            return []
        replies = self.pipeline(build)
        error = next((reply for reply in replies if isinstance(reply, Exception)), None)
        if error is not None:
            raise error
        return [(one, _text(reply)) for one, reply in zip(expired, replies, strict=True)]
