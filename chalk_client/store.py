# Generated from chalk_client/async_store.py by scripts/unasync.py: edit that file, not this one.
"""The client's half of the cluster store: submit jobs, wait for them, read results.

Everything goes through pipelines: submitting a batch costs a few round trips
per thousand jobs, however many jobs there are. The commands themselves are
queued by the builders of ``chalk_client.cluster.submit``. Waiting is a blocking
pop on the waiter's own list (``chalk:done:WAITER``), which the worker's finish
script fills: no polling. Every Redis error becomes a ``ChalkError``
(``reaching``).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from functools import partial

import redis

from chalk_client.cluster import keys
from chalk_client.cluster.callbacks import (
    CallbackState,
    parse_state,
    queue_read,
    queue_register,
)
from chalk_client.cluster.cancel import (
    CancelOutcome,
    CancelReport,
    cancelled_result,
    parse_cancel,
    queue_cancel,
    queue_drop_waiting,
)
from chalk_client.cluster.replicas import queue_wait, split_wait, with_wait
from chalk_client.cluster.script import (
    Pipeline,
    as_int,
    as_list,
    as_text,
    first_error,
    run_pipeline,
)
from chalk_client.cluster.submit import (
    CHUNK,
    chunk_replies,
    distinct_blobs,
    plan_chunks,
    queue_batch_index,
    queue_blob_refresh,
    queue_published,
    queue_release,
    queue_submit_chunk,
)
from chalk_client.cluster.watch import JobState, parse_states, queue_states, queue_watches
from chalk_client.errors import QueueUnavailableError
from chalk_client.jobs import DEFAULT_PRIORITY, JobResult, Priority
from chalk_client.records import PreparedJob, load_result
from chalk_client.settings import ChalkSettings
from chalk_client.store_errors import reaching

log = logging.getLogger(__name__)

SHORT_LOG_EVERY_S = 60.0
"""Results read before their replicas had them are logged at most this often."""
DRAIN = 10_000
"""Most finished ids taken from a done list in one call."""


class JobStore:
    """Access to the cluster's jobs and results, for ``ChalkClient``."""

    def __init__(self, client: redis.Redis, settings: ChalkSettings, url: str) -> None:
        self.redis = client
        self.settings = settings
        self.url = url
        self._blmpop = True
        """Whether Redis has ``BLMPOP`` (7.0 and later); found out at the first wait."""
        self._quiet_until = 0.0
        """Until when results read without their replicas go unmentioned (logged once a minute)."""

    def _pipeline(self, build: Callable[[Pipeline], object], *, each: bool = False) -> list[object]:
        """Run the commands ``build`` queues in one round trip, loading scripts if needed.

        A command's error is raised (as a ``ChalkError``), or with ``each`` left in
        its place among the replies.
        """
        with reaching(self.url):
            replies = run_pipeline(self.redis, build)
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
        priority: Priority = DEFAULT_PRIORITY,
        callback_url: str | None = None,
    ) -> Iterator[tuple[Sequence[PreparedJob], list[str | Exception]]]:
        """Record and enqueue ``jobs``, a chunk per round trip; yields each chunk and its replies.

        A reply is the job's outcome (``queued``, ``requeued``, ``duplicate``,
        ``done``) or the error Redis gave for it (out of memory, say).
        ``messages`` builds each job's broker message (a Redis broker); with
        ``None`` the caller publishes the jobs whose outcome is ``queued`` or
        ``requeued`` itself, then says so (``published``) or gives them back
        (``release``). ``priority`` is the lane of jobs without one of their own. A
        batch's ``callback_url`` is registered with its id list, before any job is pushed.
        """
        settings = self.settings
        if batch_id is not None:
            listed = set(self.batch_ids(batch_id))
            ids = [job.job_id for job in jobs if job.job_id not in listed]

            def index(pipe: Pipeline) -> None:
                queue_batch_index(pipe, batch_id=batch_id, job_ids=ids, settings=settings)
                if callback_url is not None:  # after the ids: the workers see both at once
                    delivery_id = str(uuid.uuid4())
                    queue_register(pipe, batch_id, callback_url, delivery_id, settings.result_ttl_s)

            self._pipeline(index)
        blobs = distinct_blobs(jobs)
        alive = self._pipeline(partial(queue_blob_refresh, digests=list(blobs), settings=settings))
        missing = {digest for digest, kept in zip(blobs, alive, strict=True) if not kept}
        unconfirmed: str | None = None
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
                priority=priority,
            )
            replies, short = split_wait(
                self._pipeline(partial(with_wait, build, settings), each=True), settings
            )
            unconfirmed = unconfirmed or short
            yield chunk, chunk_replies(chunk, writes, replies)
        if unconfirmed is not None:  # queued, but not yet where a failover keeps them
            raise QueueUnavailableError(
                f"the {len(jobs)} job(s) were queued, but {unconfirmed}. Submitting them "
                "again (the same ids, the same batch_id) is safe and waits for the replicas "
                "again: a job is never scored twice",
                batch_id=batch_id,
            )

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
                now = self.redis.lpop(key, DRAIN)
                return [as_text(item) for item in as_list(now or [])]
            if self._blmpop:
                try:  # one command for the first id and the rest (Redis 7)
                    found = self._pop(key, timeout)
                    return [as_text(item) for item in as_list(as_list(found)[1])] if found else []
                except redis.exceptions.ResponseError as exc:
                    if "unknown command" not in str(exc).lower():
                        raise
                    self._blmpop = False  # Redis 6.2: BLPOP, then LPOP the rest
            first = self.redis.blpop([key], timeout=timeout)
            if first is None:
                return []
            rest = self.redis.lpop(key, DRAIN)
        return [as_text(first[1]), *(as_text(item) for item in as_list(rest or []))]

    def _pop(self, key: str, timeout: float) -> object:
        """``BLMPOP`` of finished ids; then, if asked, a wait for the replicas to have them.

        The pop is a write on this connection, made after the results it names:
        once replicas have it, they have those results too.
        """
        if not self.settings.redis_wait_replicas:
            return self.redis.blmpop(timeout, 1, key, direction="LEFT", count=DRAIN)
        pipe = self.redis.pipeline(transaction=False)
        pipe.blmpop(timeout, 1, key, direction="LEFT", count=DRAIN)
        queue_wait(pipe, self.settings)
        found, waited = pipe.execute(raise_on_error=False)
        if isinstance(found, Exception):
            raise found
        _, short = split_wait([waited], self.settings)
        if short is not None and found and time.monotonic() >= self._quiet_until:
            self._quiet_until = time.monotonic() + SHORT_LOG_EVERY_S
            log.warning("results read before their replicas had them: %s", short)
        return found

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
                raws = self.redis.mget(part)
                found.extend(load_result(raw) for raw in raws)
        return found

    def batch_ids(self, batch_id: str) -> list[str]:
        """A batch's job ids in order (empty for an unknown batch)."""
        with reaching(self.url):
            ids = self.redis.lrange(keys.batch(batch_id), 0, -1)
        return [as_text(i) for i in ids]

    def callback_state(self, batch_id: str) -> CallbackState | None:
        """The batch's callback as Redis has it, or ``None`` if it has none."""
        with reaching(self.url):
            pipe = self.redis.pipeline(transaction=True)  # the reads see one moment
            queue_read(pipe, batch_id)
            replies = pipe.execute()
        return parse_state(batch_id, replies)

    def recent_batches(self, count: int) -> list[str]:
        """The ids of the most recent batches, newest first."""
        with reaching(self.url):
            ids = self.redis.zrevrange(keys.BATCHES, 0, count - 1)
        return [as_text(i) for i in ids]

    def states(self, job_ids: Sequence[str]) -> list[JobState]:
        """What the store knows of each unfinished job: record, lease, attempts."""
        states: list[JobState] = []
        for start in range(0, len(job_ids), CHUNK):
            part = job_ids[start : start + CHUNK]
            replies = self._pipeline(partial(queue_states, job_ids=part))
            states.extend(parse_states(replies))
        return states

    def cancel_batch(self, batch_id: str, job_ids: Sequence[str] = ()) -> CancelReport:
        """Cancel the unfinished jobs of ``batch_id``: each gets its ``cancelled`` result
        (workers stop those they run), then the batch's waiting messages are dropped;
        results already written stay. The batch's jobs are those Redis lists under its id
        (every submit under it), and ``job_ids`` too.

        The results come first: a job without a message then (a cancel stopped halfway)
        is never one the reconciler would send again; a message left behind is dropped
        by the worker that takes it (its job has a result).
        """
        settings = self.settings
        ttl = settings.result_ttl_s
        outcomes: Counter[CancelOutcome] = Counter()
        unique = list(dict.fromkeys([*self.batch_ids(batch_id), *job_ids]))
        for start in range(0, len(unique), CHUNK):
            part = unique[start : start + CHUNK]
            made = {job_id: cancelled_result(job_id, batch_id).model_dump_json() for job_id in part}
            replies = self._pipeline(
                partial(queue_cancel, job_ids=part, result_json=made, ttl_s=ttl)
            )
            outcomes.update(parse_cancel(reply) for reply in replies)
        dropped = self._pipeline(
            partial(queue_drop_waiting, queue=settings.queue, batch_id=batch_id)
        )
        return CancelReport(batch_id, outcomes, as_int(dropped[0]))

    def queue_length(self) -> int:
        """Messages waiting in the broker queue, when the broker is this Redis."""
        with reaching(self.url):
            return int(self.redis.llen(self.settings.queue))

    def running_count(self) -> int:
        """Jobs holding a lease right now."""
        with reaching(self.url):
            return int(self.redis.zcard(keys.RUNNING))
