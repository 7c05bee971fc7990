"""The client's half of the cluster store: submit jobs, wait for them, read results.

Everything goes through pipelines: submitting a batch costs a few round trips
per thousand jobs, however many jobs there are. The commands themselves are
queued by the ``queue_*`` functions, shared with ``chalk_client.async_store``.
Waiting is a blocking pop on the waiter's own list (``chalk:done:WAITER``), which
the worker's finish script fills: no polling.

Every Redis error becomes a ``ChalkError`` here (``reaching``): callers of the
client never see a raw ``redis`` exception.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.exceptions import NoScriptError

from chalk_client import keys
from chalk_client.errors import (
    ChalkError,
    ConfigurationError,
    QueueError,
    QueueUnavailableError,
    StoreFullError,
    StoreRefusedError,
)
from chalk_client.jobs import JobResult
from chalk_client.records import PreparedJob, load_result
from chalk_client.scripts import ALL, PUBLISHED, RELEASE, SUBMIT, WATCH, Script
from chalk_client.settings import ChalkSettings

CHUNK = 500
"""Jobs per pipeline when submitting; bounds the memory of one round trip."""
DRAIN = 10_000
"""Most finished ids taken from a done list in one call."""


def redacted(url: str) -> str:
    """``url`` with its password hidden, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit((parts.scheme, user + host, parts.path, parts.query, parts.fragment))


URL_FORMS = (
    "redis://[[user]:password@]host:port/db (e.g. redis://127.0.0.1:6379/0), "
    "rediss://... for TLS, or unix:///path/to/redis.sock?db=0"
)
"""What a valid Redis URL looks like, for error messages."""


def shown_url(url: str) -> str:
    """``url`` for a message: its password hidden, even if the URL is malformed."""
    try:
        return redacted(url)
    except ValueError:
        return "(a malformed URL)" if "@" in url else url


def checked_url(url: str, connect: Callable[[str], Any]) -> Any:
    """``connect(url)``; a URL it cannot parse raises ``ConfigurationError`` saying why."""
    try:
        return connect(url)
    except ValueError as exc:
        raise ConfigurationError(
            f"{shown_url(url)!r} is not a Redis URL ({exc}); give one like {URL_FORMS} "
            "(CHALK_REDIS_URL, or ChalkClient(redis_url=...))"
        ) from exc


def connect(url: str) -> redis.Redis:
    """A Redis client for the store (bytes in and out; no read timeout, for blocking pops).

    Raises ``ConfigurationError`` for a URL that is not a Redis URL.
    """
    client: redis.Redis = checked_url(
        url,
        partial(redis.Redis.from_url, socket_connect_timeout=5, socket_keepalive=True),
    )
    return client


def store_error(exc: redis.RedisError, url: str) -> ChalkError:
    """The ``ChalkError`` a Redis error means, saying what to do about it."""
    where = shown_url(url)
    if isinstance(exc, (redis.AuthenticationError, redis.exceptions.AuthorizationError)):
        return ConfigurationError(
            f"Redis at {where} refused the credentials: {exc}. Check the user and password "
            "in CHALK_REDIS_URL."
        )
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        return QueueUnavailableError(
            f"cannot reach Redis at {where}: {str(exc).rstrip('.')}. Is it running? "
            "Check CHALK_REDIS_URL."
        )
    if isinstance(exc, redis.exceptions.OutOfMemoryError):
        return StoreFullError(
            f"Redis at {where} is out of memory: its used memory is over maxmemory, so it "
            f"refuses writes ({exc}). Free memory (raise maxmemory, shorten "
            "CHALK_RESULT_TTL_S/CHALK_JOB_TTL_S, delete old results), then try again."
        )
    if isinstance(exc, redis.exceptions.ReadOnlyError):
        return StoreRefusedError(
            f"Redis at {where} is a read-only replica ({exc}): point CHALK_REDIS_URL at "
            "the primary."
        )
    if isinstance(exc, redis.ResponseError):
        return StoreRefusedError(
            f"Redis at {where} refused a command: {exc}. Check its log and settings "
            "(persistence, ACLs, memory) and that nothing else writes chalk:* keys."
        )
    return QueueError(f"talking to Redis at {where} failed: {type(exc).__name__}: {exc}")


@contextmanager
def reaching(url: str) -> Iterator[None]:
    """Turn any Redis error into a ``ChalkError`` naming the URL (``store_error``).

    An unreachable Redis is ``QueueUnavailableError``; one out of memory is
    ``StoreFullError``.
    """
    try:
        yield
    except redis.RedisError as exc:
        raise store_error(exc, url) from exc


def chunks(items: Sequence[PreparedJob], size: int = CHUNK) -> Iterator[Sequence[PreparedJob]]:
    """``items`` in consecutive slices of at most ``size``."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def distinct_blobs(jobs: Sequence[PreparedJob]) -> dict[str, bytes]:
    """Each distinct submission archive of ``jobs``, by digest."""
    return {job.digest: job.archive for job in jobs if job.archive is not None}


def run_script(pipe: Any, script: Script, keys_: Sequence[str], args: Sequence[Any]) -> None:
    """Queue one ``EVALSHA`` on ``pipe``."""
    pipe.evalsha(script.sha, len(keys_), *keys_, *args)


def queue_submit(
    pipe: Any,
    job: PreparedJob,
    settings: ChalkSettings,
    *,
    waiter: str,
    message: tuple[str, str] | None,
    retry_failed: bool,
    publishes: bool = False,
    batch_id: str | None = None,
) -> None:
    """Queue the submit script of one job: claim the id, record, enqueue, register the waiter.

    ``message`` is the job's queue message and its task id (a Redis broker).
    ``publishes``: the caller sends the message itself (a separate broker), so
    the record stays ``unpublished`` until ``queue_published`` says it went.
    """
    text, task_id = message or ("", "")
    run_script(
        pipe,
        SUBMIT,
        [
            keys.job(job.job_id),
            keys.result(job.job_id),
            keys.watchers(job.job_id),
            settings.queue,
            keys.owner(job.job_id),
            keys.PENDING,
        ],
        [
            job.job_id,
            job.record,
            job.digest,
            settings.job_ttl_s,
            waiter,
            text,
            "1" if retry_failed else "0",
            "1" if publishes else "0",
            task_id,
            batch_id or "",
        ],
    )


def queue_published(pipe: Any, job_ids: Sequence[str], waiter: str) -> None:
    """Queue, per job, the note that this submit's publish of its message went through."""
    for job_id in job_ids:
        run_script(pipe, PUBLISHED, [keys.job(job_id), keys.PENDING], [waiter, job_id])


def queue_release(pipe: Any, job_ids: Sequence[str], waiter: str) -> None:
    """Queue, per job whose publish failed, the release of the record this submit made."""
    for job_id in job_ids:
        run_script(
            pipe,
            RELEASE,
            [
                keys.job(job_id),
                keys.result(job_id),
                keys.watchers(job_id),
                keys.owner(job_id),
                keys.PENDING,
            ],
            [waiter, job_id],
        )


def queue_blob_refresh(pipe: Any, digests: Sequence[str], settings: ChalkSettings) -> None:
    """Queue an ``EXPIRE`` per archive: a reply of 0 means it must be written again."""
    for digest in digests:
        pipe.expire(keys.blob(digest), settings.blob_ttl_s)


def queue_watches(pipe: Any, job_ids: Sequence[str], waiter: str, settings: ChalkSettings) -> None:
    """Queue ``queue_watch`` for each job."""
    for job_id in job_ids:
        queue_watch(pipe, job_id, waiter, settings)


def queue_submit_chunk(
    pipe: Any,
    chunk: Sequence[PreparedJob],
    blobs: dict[str, bytes],
    settings: ChalkSettings,
    waiter: str,
    messages: Callable[[str], tuple[str, str]] | None,
    retry_failed: bool,
    batch_id: str | None = None,
) -> None:
    """Queue the archives to write (before any job naming them), then each job's submit.

    With ``messages`` (a Redis broker: each job's message and its task id) each
    script enqueues its job's message; without, the caller publishes the fresh
    jobs itself.
    """
    for digest, archive in blobs.items():
        pipe.set(keys.blob(digest), archive, ex=settings.blob_ttl_s)
    for job in chunk:
        queue_submit(
            pipe,
            job,
            settings,
            waiter=waiter,
            message=None if messages is None else messages(job.job_id),
            retry_failed=retry_failed,
            publishes=messages is None,
            batch_id=batch_id,
        )


def plan_chunks(
    jobs: Sequence[PreparedJob], blobs: dict[str, bytes], missing: set[str]
) -> Iterator[tuple[Sequence[PreparedJob], dict[str, bytes]]]:
    """Each chunk of ``jobs`` with the archives it must write first (each written once)."""
    for chunk in chunks(jobs):
        writes = {job.digest: blobs[job.digest] for job in chunk if job.digest in missing}
        missing -= writes.keys()
        yield chunk, writes


def queue_watch(pipe: Any, job_id: str, waiter: str, settings: ChalkSettings) -> None:
    """Queue the watch script: the waiter hears of the job when it finishes (or now, if it has)."""
    run_script(
        pipe,
        WATCH,
        [keys.result(job_id), keys.job(job_id), keys.watchers(job_id)],
        [job_id, waiter, settings.result_ttl_s],
    )


def queue_batch_index(
    pipe: Any, batch_id: str, job_ids: Sequence[str], settings: ChalkSettings
) -> None:
    """Queue the batch's ordered id list and its entry among the recent batches."""
    if not job_ids:
        return
    for start in range(0, len(job_ids), CHUNK * 10):
        pipe.rpush(keys.batch(batch_id), *job_ids[start : start + CHUNK * 10])
    pipe.expire(keys.batch(batch_id), settings.result_ttl_s)
    pipe.zadd(keys.BATCHES, {batch_id: time.time()})
    pipe.zremrangebyrank(keys.BATCHES, 0, -keys.RECENT_BATCHES_KEPT - 1)


@dataclass(frozen=True)
class JobState:
    """Where an unfinished job is: recorded (else unknown or expired), leased, tried."""

    recorded: bool
    running: bool
    attempts: int


def queue_states(pipe: Any, job_ids: Sequence[str]) -> None:
    """Queue, per job, the three reads ``parse_states`` turns into a ``JobState``."""
    for job_id in job_ids:
        pipe.exists(keys.job(job_id))
        pipe.zscore(keys.RUNNING, job_id)
        pipe.get(keys.attempts(job_id))


def parse_states(replies: Sequence[Any]) -> list[JobState]:
    """The ``JobState`` of each job from the replies of ``queue_states``."""
    return [
        JobState(bool(replies[i]), replies[i + 1] is not None, int(replies[i + 2] or 0))
        for i in range(0, len(replies), 3)
    ]


def first_error(replies: Sequence[Any]) -> Exception | None:
    """The first error among pipeline replies, if any."""
    return next((reply for reply in replies if isinstance(reply, Exception)), None)


def merge_replies(before: list[Any] | None, after: list[Any]) -> list[Any]:
    """Replies of a pipeline run again after ``NOSCRIPT``: the first run's successes stand."""
    if before is None:
        return after
    return [a if isinstance(b, Exception) else b for b, a in zip(before, after, strict=True)]


def as_text(value: bytes | str) -> str:
    """A Redis reply as text."""
    return value.decode() if isinstance(value, bytes) else value


def chunk_replies(
    chunk: Sequence[PreparedJob], writes: dict[str, bytes], replies: Sequence[Any]
) -> list[str | Exception]:
    """Each job's submit reply (text or error); a job whose archive could not be written
    gets that error, whatever its own reply."""
    failed = {
        digest: reply
        for digest, reply in zip(writes, replies, strict=False)
        if isinstance(reply, Exception)
    }
    return [
        failed.get(job.digest, reply if isinstance(reply, Exception) else as_text(reply))
        for job, reply in zip(chunk, replies[len(writes) :], strict=True)
    ]


class JobStore:
    """Blocking access to the cluster's jobs and results, for ``ChalkClient``."""

    def __init__(self, client: redis.Redis, settings: ChalkSettings, url: str) -> None:
        self.redis = client
        self.settings = settings
        self.url = url

    def _pipeline(self, build: Callable[[Any], object], *, each: bool = False) -> list[Any]:
        """Run the commands ``build`` queues in one round trip, loading scripts if needed.

        A command's error is raised (as a ``ChalkError``), or with ``each`` left in
        its place among the replies.
        """
        previous: list[Any] | None = None
        with reaching(self.url):
            for _ in range(2):
                pipe = self.redis.pipeline(transaction=False)
                build(pipe)
                replies = merge_replies(previous, pipe.execute(raise_on_error=False))
                if not any(isinstance(reply, NoScriptError) for reply in replies):
                    break
                previous = replies
                for script in ALL:
                    self.redis.script_load(script.text)
            error = first_error(replies)
            if error is not None and not each:
                raise error
            return replies

    def submit(
        self,
        jobs: Sequence[PreparedJob],
        *,
        waiter: str,
        messages: Callable[[str], tuple[str, str]] | None,
        retry_failed: bool = False,
        batch_id: str | None = None,
    ) -> Iterator[tuple[Sequence[PreparedJob], list[str | Exception]]]:
        """Record and enqueue ``jobs``, a chunk per round trip; yields each chunk and its replies.

        A reply is the job's outcome (``queued``, ``requeued``, ``duplicate``,
        ``done``) or the error Redis gave for it (out of memory, say).
        ``messages`` builds each job's broker message (a Redis broker); with
        ``None`` the caller publishes the jobs whose outcome is ``queued`` or
        ``requeued`` itself, then says so (``published``) or gives them back
        (``release``).
        """
        settings = self.settings
        if batch_id is not None:
            listed = set(self.batch_ids(batch_id))
            ids = [job.job_id for job in jobs if job.job_id not in listed]
            self._pipeline(
                partial(queue_batch_index, batch_id=batch_id, job_ids=ids, settings=settings)
            )
        blobs = distinct_blobs(jobs)
        alive = self._pipeline(partial(queue_blob_refresh, digests=list(blobs), settings=settings))
        missing = {digest for digest, kept in zip(blobs, alive, strict=True) if not kept}
        for chunk, writes in plan_chunks(jobs, blobs, missing):
            build = partial(
                queue_submit_chunk,
                chunk=chunk,
                blobs=writes,
                settings=settings,
                waiter=waiter,
                messages=messages,
                retry_failed=retry_failed,
                batch_id=batch_id,
            )
            yield chunk, chunk_replies(chunk, writes, self._pipeline(build, each=True))

    def published(self, job_ids: Sequence[str], waiter: str) -> None:
        """Note that this submit (``waiter``) published the messages of ``job_ids``."""
        if job_ids:
            self._pipeline(partial(queue_published, job_ids=job_ids, waiter=waiter))

    def release(self, job_ids: Sequence[str], waiter: str) -> list[str]:
        """Give back the jobs whose publish failed; per job ``released``, ``unpublished``
        (either way the next submit sends it) or ``queued`` (it was delivered after all)."""
        if not job_ids:
            return []
        replies = self._pipeline(partial(queue_release, job_ids=job_ids, waiter=waiter))
        return [as_text(reply) for reply in replies]

    def watch(self, job_ids: Sequence[str], waiter: str) -> list[str]:
        """Have ``waiter`` told when each job finishes.

        Returns per job ``done`` (it has a result: nothing will be told),
        ``waiting`` or ``unknown`` (no such job).
        """
        replies: list[str] = []
        for start in range(0, len(job_ids), CHUNK):
            part = job_ids[start : start + CHUNK]
            build = partial(queue_watches, job_ids=part, waiter=waiter, settings=self.settings)
            replies.extend(as_text(reply) for reply in self._pipeline(build))
        return replies

    def pop_done(self, waiter: str, timeout: float) -> list[str]:
        """Ids of the waiter's finished jobs, blocking up to ``timeout`` seconds for the first.

        A ``timeout`` of 0 (or less) takes what is there without blocking.
        """
        key = keys.done(waiter)
        with reaching(self.url):
            if timeout <= 0:
                now: Any = self.redis.lpop(key, DRAIN)
                return [as_text(item) for item in now or []]
            first: Any = self.redis.blpop([key], timeout=timeout)
            if first is None:
                return []
            rest: Any = self.redis.lpop(key, DRAIN)
        return [as_text(first[1]), *(as_text(item) for item in rest or [])]

    def forget(self, waiter: str) -> None:
        """Delete the waiter's done list: its wait is over."""
        with reaching(self.url):
            self.redis.delete(keys.done(waiter))

    def results(self, job_ids: Sequence[str]) -> list[JobResult | None]:
        """The stored result of each job, ``None`` where there is none yet."""
        found: list[JobResult | None] = []
        with reaching(self.url):
            for start in range(0, len(job_ids), CHUNK * 4):
                part = [keys.result(i) for i in job_ids[start : start + CHUNK * 4]]
                raws: Any = self.redis.mget(part)
                found.extend(load_result(raw) for raw in raws)
        return found

    def batch_ids(self, batch_id: str) -> list[str]:
        """A batch's job ids in order (empty for an unknown batch)."""
        with reaching(self.url):
            ids: Any = self.redis.lrange(keys.batch(batch_id), 0, -1)
        return [as_text(i) for i in ids]

    def recent_batches(self, count: int) -> list[str]:
        """The ids of the most recent batches, newest first."""
        with reaching(self.url):
            ids: Any = self.redis.zrevrange(keys.BATCHES, 0, count - 1)
        return [as_text(i) for i in ids]

    def states(self, job_ids: Sequence[str]) -> list[JobState]:
        """What the store knows of each unfinished job: record, lease, attempts."""
        states: list[JobState] = []
        for start in range(0, len(job_ids), CHUNK):
            part = job_ids[start : start + CHUNK]
            states.extend(parse_states(self._pipeline(partial(queue_states, job_ids=part))))
        return states

    def queue_length(self) -> int:
        """Messages waiting in the broker queue, when the broker is this Redis."""
        with reaching(self.url):
            return int(self.redis.llen(self.settings.queue))

    def running_count(self) -> int:
        """Jobs holding a lease right now."""
        with reaching(self.url):
            return int(self.redis.zcard(keys.RUNNING))
