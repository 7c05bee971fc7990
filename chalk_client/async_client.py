"""``AsyncChalkClient``: submit jobs to a Chalk cluster and get their results, in asyncio.

    async with AsyncChalkClient("redis://127.0.0.1:6379/0") as client:
        result = await client.submit_and_wait(job, timeout=60)
        batch = await client.submit_batch(jobs)
        async for result in batch:            # as they finish
            ...
        await batch.results()                 # in job order

A job id is the idempotency key: the same id submitted twice (by anyone, at
any time while its result is kept) is scored once, and every caller gets that
one result. Waiting never polls: the worker that finishes a job pushes its id
to each waiter's list, on which the waiter blocks; results already there are
read at once, so a zero timeout returns them too. A submit that cannot queue
every job (Redis or the broker down, Redis out of memory) raises a
``QueueError`` naming the jobs it did not queue: sending them again is safe.

This module is the source of ``chalk_client.client`` (``ChalkClient``, the same
verbs without ``await``), which ``scripts/unasync.py`` generates from it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import suppress
from types import TracebackType

from chalk_client.async_store import AsyncJobStore
from chalk_client.broker import KombuPublisher, SubmitLedger
from chalk_client.cluster.connection import connect_async, redacted
from chalk_client.cluster.messages import queue_message
from chalk_client.cluster.presence import WorkerPresence, read_workers_async
from chalk_client.errors import (
    ChalkError,
    ConfigurationError,
    NoLiveWorkerError,
    QueueError,
    QueueUnavailableError,
    ResultTimeout,
)
from chalk_client.jobs import JobResult, JobStatus
from chalk_client.records import JobLike, PreparedJob, prepare_job
from chalk_client.settings import ChalkSettings
from chalk_client.store_errors import reaching
from chalk_client.summary import BatchSummary, summarize
from chalk_client.waiting import (
    RECONNECT_S,
    STALE_AFTER_S,
    Progress,
    deadline_of,
    describe_state,
    new_waiter,
    next_slice,
    shown_ids,
)
from chalk_client.workers import POLL_S, no_worker_message, on_queue


class _AsyncCollector:
    """The results of some jobs, gathered as the waiter's list announces them.

    Results that were there before the waiter watched are read directly (a
    waiter's list is told only of jobs that finish later), and so are those
    whose announcement may have expired while nobody read the list.
    """

    def __init__(
        self, store: AsyncJobStore, waiter: str, job_ids: Iterable[str], *, watching: bool
    ) -> None:
        self.store = store
        self.waiter = waiter
        self.pending = dict.fromkeys(job_ids)
        self.results: dict[str, JobResult] = {}
        self._watching = watching
        self._read_at: float | None = None
        self._unreachable_since: float | None = None

    async def collect(self, timeout: float) -> list[JobResult]:
        """Results that arrived within ``timeout`` seconds (maybe none; 0 does not block).

        While Redis cannot be reached (a restart), this waits for it, up to
        ``RECONNECT_S``; then it asks again about every pending job, so that an
        announcement lost with the connection is not missed.
        """
        try:
            fresh = await self._catch_up()
            if not fresh and self.pending:
                self._read_at = time.monotonic()
                done = await self.store.pop_done(self.waiter, timeout)
                fresh = await self._take(done, announced=True)
            self._unreachable_since = None
        except QueueUnavailableError:
            now = time.monotonic()
            self._unreachable_since = self._unreachable_since or now
            if now - self._unreachable_since > RECONNECT_S:
                raise
            await asyncio.sleep(max(min(timeout, 0.5), 0.0))
            return []
        if not self.pending:
            with suppress(ChalkError):  # the list expires by itself anyway
                await self.store.forget(self.waiter)
        return fresh

    async def _catch_up(self) -> list[JobResult]:
        now = time.monotonic()
        if not self._watching or self._unreachable_since is not None:
            self._read_at = now
            ids = list(self.pending)
            replies = await self.store.watch(ids, self.waiter)
            self._watching = True
            done = [i for i, reply in zip(ids, replies, strict=True) if reply == "done"]
            return await self._take(done)
        if self._read_at is None or now - self._read_at > STALE_AFTER_S:
            self._read_at = now
            return await self._take(list(self.pending))
        return []

    async def _take(self, job_ids: Iterable[str], *, announced: bool = False) -> list[JobResult]:
        """The results of those of ``job_ids`` still pending, as far as they exist.

        An ``announced`` job without a result had its failed result cleared to be
        scored again: the waiter watches it again.
        """
        ids = [job_id for job_id in dict.fromkeys(job_ids) if job_id in self.pending]
        fresh: list[JobResult] = []
        lost: list[str] = []
        for job_id, result in zip(ids, await self.store.results(ids), strict=True):
            if result is None:
                lost.append(job_id)  # announced, but a failed result was cleared to retry it
                continue
            del self.pending[job_id]
            self.results[job_id] = result
            fresh.append(result)
        if lost and announced:
            replies = await self.store.watch(lost, self.waiter)
            again = [i for i, reply in zip(lost, replies, strict=True) if reply == "done"]
            found = await self.store.results(again)
            for job_id, result in zip(again, found, strict=True):
                if result is not None:
                    del self.pending[job_id]
                    self.results[job_id] = result
                    fresh.append(result)
        return fresh


class AsyncJobHandle:
    """One submitted job: wait for its result, or look at it."""

    def __init__(
        self, store: AsyncJobStore, job_id: str, waiter: str, *, watching: bool = True
    ) -> None:
        self.job_id = job_id
        self._store = store
        self._collector = _AsyncCollector(store, waiter, [job_id], watching=watching)

    async def wait(self, timeout: float | None = None) -> JobResult:
        """The job's result; raises ``ResultTimeout`` if none comes within ``timeout`` seconds.

        A result already there is returned whatever the timeout, 0 included.
        """
        deadline = deadline_of(timeout)
        while self.job_id not in self._collector.results:
            left = next_slice(deadline)
            await self._collector.collect(max(left, 0.0))
            if self.job_id not in self._collector.results and left <= 0:
                state = describe_state(await self.status())
                raise ResultTimeout(
                    f"job {self.job_id!r} has no result after {timeout:g} s ({state}); wait "
                    f"again with AsyncChalkClient.job({self.job_id!r}).wait(timeout)"
                )
        return self._collector.results[self.job_id]

    async def get(self) -> JobResult | None:
        """The result if the job has finished, else ``None``; does not wait."""
        found = self._collector.results.get(self.job_id)
        return found or (await self._store.results([self.job_id]))[0]

    async def status(self) -> JobStatus | None:
        """``queued``, ``running``, ``succeeded``, ``failed``; ``None`` for an unknown job."""
        result = await self.get()
        if result is not None:
            return result.status
        state = (await self._store.states([self.job_id]))[0]
        if state.finished:  # it finished between the two reads
            finished = await self.get()
            return None if finished is None else finished.status
        if not state.recorded:
            return None
        return JobStatus.RUNNING if state.running else JobStatus.QUEUED

    def __repr__(self) -> str:
        return f"AsyncJobHandle({self.job_id!r})"


class AsyncBatch:
    """Jobs submitted together: iterate over results as they finish, or wait for all.

    ``job_ids`` keeps the order (and repeats) of the jobs as given; a repeated
    id is one job with one result. A batch is not meant to be shared by threads.
    """

    def __init__(
        self,
        store: AsyncJobStore,
        batch_id: str,
        job_ids: Sequence[str],
        waiter: str,
        *,
        watching: bool = True,
    ) -> None:
        self.id = batch_id
        self.job_ids = list(job_ids)
        self._store = store
        self._collector = _AsyncCollector(store, waiter, self.job_ids, watching=watching)

    def __len__(self) -> int:
        return len(self.job_ids)

    def __aiter__(self) -> AsyncIterator[JobResult]:
        return self.as_completed()

    @property
    def total(self) -> int:
        """Distinct jobs in the batch."""
        return len(self._collector.pending) + len(self._collector.results)

    @property
    def done(self) -> int:
        """Distinct jobs whose result this batch has received."""
        return len(self._collector.results)

    async def as_completed(self, timeout: float | None = None) -> AsyncIterator[JobResult]:
        """Each job's result once, as it finishes (those already in first).

        Raises ``ResultTimeout`` naming the jobs still unfinished after ``timeout``
        seconds; results already there are yielded first, whatever the timeout.
        """
        for result in list(self._collector.results.values()):
            yield result
        deadline = deadline_of(timeout)
        while self._collector.pending:
            left = next_slice(deadline)
            for result in await self._collector.collect(max(left, 0.0)):
                yield result
            if self._collector.pending and left <= 0:
                raise self._timeout(timeout)

    async def wait(
        self, timeout: float | None = None, progress: Progress | None = None
    ) -> list[JobResult]:
        """Wait for every job (``progress(done, total)`` as each finishes); results in job order."""
        async for _ in self.as_completed(timeout):
            if progress is not None:
                progress(self.done, self.total)
        return [self._collector.results[job_id] for job_id in self.job_ids]

    async def results(self, timeout: float | None = None) -> list[JobResult]:
        """Every job's result in the order the jobs were given, waiting for those unfinished."""
        return await self.wait(timeout)

    async def summary(self) -> BatchSummary:
        """Counts by status (queued and running included), mean score, failures: as of now."""
        ids = list(dict.fromkeys(self.job_ids))
        results = await self._store.results(ids)
        unfinished = [job_id for job_id, result in zip(ids, results, strict=True) if result is None]
        states = await self._store.states(unfinished)
        return summarize(ids, results, states, batch_id=self.id, settings=self._store.settings)

    def _timeout(self, timeout: float | None) -> ResultTimeout:
        pending = list(self._collector.pending)
        return ResultTimeout(
            f"batch {self.id}: {len(pending)} of {self.total} jobs have no result after "
            f"{timeout:g} s ({shown_ids(pending)}); wait again with "
            f"AsyncChalkClient.batch({self.id!r}).wait(timeout)"
        )

    def __repr__(self) -> str:
        return f"AsyncBatch({self.id!r}, {self.done}/{self.total} done)"


class AsyncChalkClient:
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
                "no cluster to submit to: pass AsyncChalkClient(redis_url=...) or set "
                "CHALK_REDIS_URL (e.g. redis://127.0.0.1:6379/0)"
            )
        self.redis_url = url
        self.store = AsyncJobStore(connect_async(url), self.settings, url)
        broker = broker_url or self.settings.broker_url
        self._publisher = (
            KombuPublisher(broker, self.settings.queue) if broker and broker != url else None
        )

    async def _submit(
        self, jobs: Sequence[PreparedJob], waiter: str, retry_failed: bool, batch_id: str | None
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
        )
        try:
            async for chunk, replies in chunks:
                fresh, error = ledger.take(chunk, replies)
                if fresh:
                    await self._publish(fresh, waiter, batch_id, ledger)
                if error is not None:
                    raise error
        except ChalkError as exc:
            raise ledger.failure(exc) from exc

    async def _publish(
        self, job_ids: list[str], waiter: str, batch_id: str | None, ledger: SubmitLedger
    ) -> None:
        """Publish fresh jobs to the broker; give back those it refused (or all, if stopped)."""
        assert self._publisher is not None
        try:
            # unasync: self._publisher.publish(job_ids, batch_id)
            await asyncio.to_thread(self._publisher.publish, job_ids, batch_id)
        except BaseException as exc:
            unsent = (exc.not_queued if isinstance(exc, QueueError) else ()) or job_ids
            ledger.queued.update(set(job_ids) - set(unsent))
            with suppress(ChalkError):  # if Redis is gone too, the next submit sends them
                outcomes = await self.store.release(list(unsent), waiter)
                ledger.queued.update(
                    i for i, outcome in zip(unsent, outcomes, strict=True) if outcome == "queued"
                )
            raise
        ledger.queued.update(job_ids)
        with suppress(ChalkError):  # unconfirmed, a later submit may send it again: harmless
            await self.store.published(job_ids, waiter)

    async def submit(self, job: JobLike, *, retry_failed: bool = False) -> AsyncJobHandle:
        """Send one job; its handle waits for the result.

        A job whose id already has a result is not scored again (``retry_failed``
        scores it again if that result is ``failed``). If the job cannot be queued
        (Redis or the broker down, Redis out of memory) this raises a ``QueueError``
        saying so; submitting it again is safe.
        """
        prepared = prepare_job(job)
        waiter = new_waiter()
        await self._submit([prepared], waiter, retry_failed, None)
        return AsyncJobHandle(self.store, prepared.job_id, waiter)

    async def submit_and_wait(
        self, job: JobLike, timeout: float | None = None, *, retry_failed: bool = False
    ) -> JobResult:
        """Send one job and wait for its result; raises ``ResultTimeout`` after ``timeout`` s."""
        handle = await self.submit(job, retry_failed=retry_failed)
        return await handle.wait(timeout)

    async def submit_batch(
        self, jobs: Iterable[JobLike], *, retry_failed: bool = False, batch_id: str | None = None
    ) -> AsyncBatch:
        """Send many jobs in a few pipelined round trips; every job is validated first.

        Raises ``InvalidJobError`` (nothing is sent) if any job is invalid. If the
        batch cannot be sent whole, the ``QueueError`` raised says how many jobs
        were queued; its ``not_queued`` and ``batch_id`` say what to send again
        (sending the whole batch again, under the same id, is safe too).
        """
        prepared = [prepare_job(job) for job in jobs]
        first: dict[str, PreparedJob] = {}
        for job in prepared:
            first.setdefault(job.job_id, job)
        batch_id = batch_id or "b-" + uuid.uuid4().hex
        waiter = new_waiter()
        await self._submit(list(first.values()), waiter, retry_failed, batch_id)
        return AsyncBatch(self.store, batch_id, [job.job_id for job in prepared], waiter)

    async def get(self, job_id: str) -> JobResult | None:
        """The job's result, or ``None`` while it has none (or no such job exists)."""
        return (await self.store.results([job_id]))[0]

    async def job(self, job_id: str) -> AsyncJobHandle:
        """A handle on a job submitted earlier (by anyone); raises ``QueueError`` if unknown.

        Looking (``get``, ``status``) leaves nothing in Redis; ``wait`` watches the job.
        """
        if await self.get(job_id) is None and not (await self.store.states([job_id]))[0].recorded:
            raise QueueError(f"no job {job_id!r} in the cluster (never submitted, or expired)")
        return AsyncJobHandle(self.store, job_id, new_waiter(), watching=False)

    async def batch(self, batch_id: str) -> AsyncBatch:
        """A batch submitted earlier (by anyone), to wait on again; ``QueueError`` if unknown."""
        ids = await self.store.batch_ids(batch_id)
        if not ids:
            raise QueueError(f"no batch {batch_id!r} in the cluster (never submitted, or expired)")
        return AsyncBatch(self.store, batch_id, ids, new_waiter(), watching=False)

    async def batch_summary(self, batch_id: str) -> BatchSummary:
        """Where a batch (by anyone) stands now; raises ``QueueError`` if unknown or expired."""
        return await (await self.batch(batch_id)).summary()

    async def workers(self) -> list[WorkerPresence]:
        """The live workers that take this client's queue (``CHALK_QUEUE``), by node name.

        Each is a ``WorkerPresence``: node, pool, concurrency, sandbox layers, LLM
        server and model. A worker is listed once it is ready to take jobs.
        """
        with reaching(self.redis_url):
            return on_queue(await read_workers_async(self.store.redis), self.settings.queue)

    async def wait_for_workers(
        self, count: int = 1, timeout: float | None = None
    ) -> list[WorkerPresence]:
        """Wait until at least ``count`` live workers take the queue; returns them.

        Raises ``NoLiveWorkerError`` after ``timeout`` seconds (``None``: wait for ever).
        Jobs may be submitted before any worker is live: they wait in the queue.
        """
        deadline = deadline_of(timeout)
        while True:
            live = await self.workers()
            if len(live) >= count:
                return live
            if deadline is not None and time.monotonic() >= deadline:
                raise NoLiveWorkerError(
                    f"{len(live)} of the {count} live worker(s) asked for after {timeout:g} s; "
                    + no_worker_message(self.redis_url, self.settings.queue)
                )
            left = POLL_S if deadline is None else deadline - time.monotonic()
            await asyncio.sleep(max(min(POLL_S, left), 0.0))

    async def close(self) -> None:
        """Close the connections."""
        await self.store.redis.aclose()
        if self._publisher is not None:
            self._publisher.close()

    def __repr__(self) -> str:
        return f"AsyncChalkClient({redacted(self.redis_url)!r})"

    async def __aenter__(self) -> AsyncChalkClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.close()
