# Generated from chalk_client/async_client.py by scripts/unasync.py: edit that file, not this one.
"""``ChalkClient``: submit jobs to a Chalk cluster and get their results.

    with ChalkClient("redis://127.0.0.1:6379/0") as client:
        result = client.submit_and_wait(job, timeout=60)
        batch = client.submit_batch(jobs)
        for result in batch:            # as they finish
            ...
        batch.results()                 # in job order

A job id is the idempotency key: the same id submitted twice (by anyone, at
any time while its result is kept) is scored once, and every caller gets that
one result. Waiting never polls: the worker that finishes a job pushes its id
to each waiter's list, on which the waiter blocks; results already there are
read at once, so a zero timeout returns them too. A submit that cannot queue
every job (Redis or the broker down, Redis out of memory) raises a
``QueueError`` naming the jobs it did not queue: sending them again is safe.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Sequence
from contextlib import suppress
from types import TracebackType

from chalk_client.broker import KombuPublisher, SubmitLedger
from chalk_client.callbacks import check_callback_url
from chalk_client.cluster.callbacks import CallbackState
from chalk_client.cluster.cancel import CancelReport
from chalk_client.cluster.connection import connect, redacted
from chalk_client.cluster.messages import queue_message
from chalk_client.cluster.presence import WorkerPresence, read_workers
from chalk_client.errors import (
    ChalkError,
    ConfigurationError,
    InvalidCallbackError,
    InvalidJobError,
    NoLiveWorkerError,
    QueueError,
)
from chalk_client.handles import Batch, JobHandle
from chalk_client.jobs import DEFAULT_PRIORITY, JobResult, Priority, check_priority
from chalk_client.records import JobLike, PreparedJob, prepare_job
from chalk_client.settings import ChalkSettings
from chalk_client.store import JobStore
from chalk_client.store_errors import reaching
from chalk_client.summary import BatchSummary
from chalk_client.waiting import (
    deadline_of,
    new_waiter,
)
from chalk_client.workers import POLL_S, no_worker_message, on_queue


class ChalkClient:
    """Submit jobs to a Chalk cluster (``CHALK_REDIS_URL``) and wait for their results.

    Jobs are validated here: an invalid job raises ``InvalidJobError`` and is not
    sent. The asyncio client belongs to one event loop; the sync ``ChalkClient``
    is safe to share between threads (its handles and batches are not).
    """

    def __init__(
        self,
        redis_url: str | None = None,
        *,
        broker_url: str | None = None,
        settings: ChalkSettings | None = None,
    ) -> None:
        self.settings = settings or ChalkSettings()
        url = redis_url or self.settings.redis_url
        if not url:
            raise ConfigurationError(
                "no cluster to submit to: pass ChalkClient(redis_url=...) or set "
                "CHALK_REDIS_URL (e.g. redis://127.0.0.1:6379/0)"
            )
        self.redis_url = url
        self.store = JobStore(connect(url), self.settings, url)
        broker = broker_url or self.settings.broker_url
        self._publisher = (
            KombuPublisher(broker, self.settings.queue) if broker and broker != url else None
        )

    def _submit(
        self,
        jobs: Sequence[PreparedJob],
        waiter: str,
        retry_failed: bool,
        batch_id: str | None,
        priority: Priority = DEFAULT_PRIORITY,
        callback_url: str | None = None,
    ) -> None:
        """Record and enqueue ``jobs``; a failure says which of them were not queued."""
        queue = self.settings.queue
        ledger = SubmitLedger(
            [job.job_id for job in jobs],
            batch_id,
            publishes=self._publisher is not None,
            url=self.redis_url,
        )
        chunks = self.store.submit(
            jobs,
            waiter=waiter,
            messages=None
            if self._publisher
            else (lambda job_id: queue_message(job_id, queue, batch_id)),
            retry_failed=retry_failed,
            batch_id=batch_id,
            priority=priority,
            callback_url=callback_url,
        )
        try:
            for chunk, replies in chunks:
                fresh, error = ledger.take(chunk, replies)
                if fresh:
                    self._publish(fresh, waiter, batch_id, ledger)
                if error is not None:
                    raise error
        except ChalkError as exc:
            raise ledger.failure(exc) from exc

    def _publish(
        self, job_ids: list[str], waiter: str, batch_id: str | None, ledger: SubmitLedger
    ) -> None:
        """Publish fresh jobs to the broker; give back those it refused (or all, if stopped)."""
        assert self._publisher is not None
        try:
            self._publisher.publish(job_ids, batch_id)
        except BaseException as exc:
            unsent = (exc.not_queued if isinstance(exc, QueueError) else ()) or job_ids
            ledger.queued.update(set(job_ids) - set(unsent))
            with suppress(ChalkError):  # if Redis is gone too, the next submit sends them
                outcomes = self.store.release(list(unsent), waiter)
                ledger.queued.update(
                    i for i, outcome in zip(unsent, outcomes, strict=True) if outcome == "queued"
                )
            raise
        ledger.queued.update(job_ids)
        with suppress(ChalkError):  # unconfirmed, a later submit may send it again: harmless
            self.store.published(job_ids, waiter)

    def submit(self, job: JobLike, *, retry_failed: bool = False) -> JobHandle:
        """Send one job; its handle waits for the result.

        A job whose id already has a result is not scored again (``retry_failed``
        scores it again if that result is ``failed``). If the job cannot be queued
        (Redis or the broker down, Redis out of memory) this raises a ``QueueError``
        saying so; submitting it again is safe.
        """
        prepared = prepare_job(job)
        waiter = new_waiter()
        self._submit([prepared], waiter, retry_failed, None)
        return JobHandle(self.store, prepared.job_id, waiter)

    def submit_and_wait(
        self, job: JobLike, timeout: float | None = None, *, retry_failed: bool = False
    ) -> JobResult:
        """Send one job and wait for its result; raises ``ResultTimeout`` after ``timeout`` s."""
        handle = self.submit(job, retry_failed=retry_failed)
        return handle.wait(timeout)

    def submit_batch(
        self,
        jobs: Iterable[JobLike],
        *,
        retry_failed: bool = False,
        batch_id: str | None = None,
        priority: Priority = DEFAULT_PRIORITY,
        callback_url: str | None = None,
    ) -> Batch:
        """Send many jobs in a few pipelined round trips; every job is validated first.

        ``priority`` (``high``, ``normal``, ``low``) applies to the jobs that do not
        name their own: workers take every higher-priority job waiting first, and
        share themselves between the batches of one priority.

        Raises ``InvalidJobError`` (nothing is sent) if any job is invalid. If the
        batch cannot be sent whole, the ``QueueError`` raised says how many jobs
        were queued; its ``not_queued`` and ``batch_id`` say what to send again
        (sending the whole batch again, under the same id, is safe too).

        With ``callback_url`` (``http://`` or ``https://``), once every job has a
        result a worker sends one signed ``POST`` of the batch's summary there,
        retried until the receiver answers 2xx (``chalk_client.callbacks``). A URL
        of the wrong form raises ``InvalidCallbackError`` and nothing is sent; the
        workers send only to hosts the operator allows (``CHALK_CALLBACK_ALLOW``).
        Sending the batch again with the same URL keeps its one callback.
        """
        try:
            priority = check_priority(priority)
        except ValueError as exc:
            raise InvalidJobError(f"{exc}: nothing was sent") from None
        prepared = [prepare_job(job) for job in jobs]
        if callback_url is not None:
            check_callback_url(callback_url)
            if not prepared:
                raise InvalidCallbackError("a batch with a callback_url needs at least one job")
        first: dict[str, PreparedJob] = {}
        for job in prepared:
            first.setdefault(job.job_id, job)
        batch_id = batch_id or "b-" + uuid.uuid4().hex
        waiter = new_waiter()
        self._submit(
            list(first.values()),
            waiter,
            retry_failed,
            batch_id,
            priority=priority,
            callback_url=callback_url,
        )
        return Batch(self.store, batch_id, [job.job_id for job in prepared], waiter)

    def get(self, job_id: str) -> JobResult | None:
        """The job's result, or ``None`` while it has none (or no such job exists)."""
        return (self.store.results([job_id]))[0]

    def job(self, job_id: str) -> JobHandle:
        """A handle on a job submitted earlier (by anyone); raises ``QueueError`` if unknown.

        Looking (``get``, ``status``) leaves nothing in Redis; ``wait`` watches the job.
        """
        if self.get(job_id) is None and not (self.store.states([job_id]))[0].recorded:
            raise QueueError(f"no job {job_id!r} in the cluster (never submitted, or expired)")
        return JobHandle(self.store, job_id, new_waiter(), watching=False)

    def batch(self, batch_id: str) -> Batch:
        """A batch submitted earlier (by anyone), to wait on again; ``QueueError`` if unknown."""
        ids = self.store.batch_ids(batch_id)
        if not ids:
            raise QueueError(f"no batch {batch_id!r} in the cluster (never submitted, or expired)")
        return Batch(self.store, batch_id, ids, new_waiter(), watching=False)

    def cancel_batch(self, batch_id: str) -> CancelReport:
        """Cancel a batch (by anyone): see ``Batch.cancel``; ``QueueError`` if unknown."""
        return (self.batch(batch_id)).cancel()

    def batch_callback(self, batch_id: str) -> CallbackState | None:
        """Where a batch's callback stands (``pending``, ``retrying``, ``delivered``,
        ``refused``, ``given-up``, with its tries and last error); ``None`` if it has none."""
        return self.store.callback_state(batch_id)

    def batch_summary(self, batch_id: str) -> BatchSummary:
        """Where a batch (by anyone) stands now; raises ``QueueError`` if unknown or expired."""
        return (self.batch(batch_id)).summary()

    def workers(self) -> list[WorkerPresence]:
        """The live workers that take this client's queue (``CHALK_QUEUE``), by node name.

        Each is a ``WorkerPresence``: node, pool, concurrency, sandbox layers, LLM
        server and model. A worker is listed once it is ready to take jobs.
        """
        with reaching(self.redis_url):
            return on_queue(read_workers(self.store.redis), self.settings.queue)

    def wait_for_workers(
        self, count: int = 1, timeout: float | None = None
    ) -> list[WorkerPresence]:
        """Wait until at least ``count`` live workers take the queue; returns them.

        Raises ``NoLiveWorkerError`` after ``timeout`` seconds (``None``: wait for ever).
        Jobs may be submitted before any worker is live: they wait in the queue.
        """
        deadline = deadline_of(timeout)
        while True:
            live = self.workers()
            if len(live) >= count:
                return live
            if deadline is not None and time.monotonic() >= deadline:
                raise NoLiveWorkerError(
                    f"{len(live)} of the {count} live worker(s) asked for after {timeout:g} s; "
                    + no_worker_message(self.redis_url, self.settings.queue)
                )
            left = POLL_S if deadline is None else deadline - time.monotonic()
            time.sleep(max(min(POLL_S, left), 0.0))

    def close(self) -> None:
        """Close the connections."""
        self.store.redis.close()
        if self._publisher is not None:
            self._publisher.close()

    def __repr__(self) -> str:
        return f"ChalkClient({redacted(self.redis_url)!r})"

    def __enter__(self) -> ChalkClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
