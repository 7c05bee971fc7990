"""``AsyncChalkClient``: ``ChalkClient``'s verbs for asyncio code.

async with AsyncChalkClient("redis://127.0.0.1:6379/0") as client:
    result = await client.submit_and_wait(job, timeout=60)
    batch = await client.submit_batch(jobs)
    async for result in batch:       # as they finish
        ...
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from types import TracebackType

from chalk_client.async_store import AsyncJobStore, connect_async
from chalk_client.broker import KombuPublisher, redis_message
from chalk_client.client import RECONNECT_S, Progress, new_waiter
from chalk_client.errors import (
    ConfigurationError,
    QueueError,
    QueueUnavailableError,
    ResultTimeout,
)
from chalk_client.jobs import JobResult, JobStatus
from chalk_client.records import JobLike, PreparedJob, prepare_job
from chalk_client.settings import ChalkSettings
from chalk_client.summary import BatchSummary, summarize

WAIT_SLICE_S = 2.0


def _left(deadline: float | None) -> float:
    if deadline is None:
        return WAIT_SLICE_S
    return min(WAIT_SLICE_S, deadline - time.monotonic())


class _AsyncCollector:
    """The results of some jobs, gathered as the waiter's list announces them."""

    def __init__(self, store: AsyncJobStore, waiter: str, job_ids: Iterable[str]) -> None:
        self.store = store
        self.waiter = waiter
        self.pending = dict.fromkeys(job_ids)
        self.results: dict[str, JobResult] = {}
        self._unreachable_since: float | None = None

    async def collect(self, timeout: float) -> list[JobResult]:
        """Results that arrived within ``timeout`` seconds (maybe none).

        Rides out an unreachable Redis as ``ChalkClient`` does (up to ``RECONNECT_S``),
        then asks again about every pending job.
        """
        try:
            if self._unreachable_since is not None:
                await self.store.watch(list(self.pending), self.waiter)
                self._unreachable_since = None
            return await self._collect(timeout)
        except QueueUnavailableError:
            now = time.monotonic()
            self._unreachable_since = self._unreachable_since or now
            if now - self._unreachable_since > RECONNECT_S:
                raise
            await asyncio.sleep(max(min(timeout, 0.5), 0.0))
            return []

    async def _collect(self, timeout: float) -> list[JobResult]:
        announced = dict.fromkeys(await self.store.pop_done(self.waiter, timeout))
        ids = [job_id for job_id in announced if job_id in self.pending]
        fresh: list[JobResult] = []
        lost: list[str] = []
        for job_id, result in zip(ids, await self.store.results(ids), strict=True):
            if result is None:
                lost.append(job_id)
                continue
            del self.pending[job_id]
            self.results[job_id] = result
            fresh.append(result)
        if lost:
            await self.store.watch(lost, self.waiter)
        return fresh


class AsyncJobHandle:
    """One submitted job, for asyncio: ``await handle.wait(timeout)``."""

    def __init__(self, store: AsyncJobStore, job_id: str, waiter: str) -> None:
        self.job_id = job_id
        self._store = store
        self._collector = _AsyncCollector(store, waiter, [job_id])

    async def wait(self, timeout: float | None = None) -> JobResult:
        """The job's result; raises ``ResultTimeout`` if none comes within ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.job_id not in self._collector.results:
            left = _left(deadline)
            if left <= 0:
                raise ResultTimeout(
                    f"job {self.job_id!r} has no result after {timeout:g} s; wait again "
                    f"with AsyncChalkClient.job({self.job_id!r}).wait(timeout)"
                )
            await self._collector.collect(left)
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
        if not state.recorded:
            return None
        return JobStatus.RUNNING if state.running else JobStatus.QUEUED


class AsyncBatch:
    """Jobs submitted together, for asyncio: ``async for result in batch``, or ``await wait()``."""

    def __init__(
        self, store: AsyncJobStore, batch_id: str, job_ids: Sequence[str], waiter: str
    ) -> None:
        self.id = batch_id
        self.job_ids = list(job_ids)
        self._store = store
        self._collector = _AsyncCollector(store, waiter, self.job_ids)

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
        """Each job's result once, as it finishes; ``ResultTimeout`` after ``timeout`` s."""
        for result in list(self._collector.results.values()):
            yield result
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._collector.pending:
            left = _left(deadline)
            if left <= 0:
                pending = list(self._collector.pending)
                raise ResultTimeout(
                    f"batch {self.id}: {len(pending)} of {self.total} jobs have no result after "
                    f"{timeout:g} s (e.g. {pending[0]!r})"
                )
            for result in await self._collector.collect(left):
                yield result

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


class AsyncChalkClient:
    """``ChalkClient`` for asyncio: the same verbs, awaited. One per event loop."""

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
        queue = self.settings.queue
        outcomes = await self.store.submit(
            jobs,
            waiter=waiter,
            messages=None
            if self._publisher
            else (lambda job_id: redis_message(job_id, queue, batch_id)),
            retry_failed=retry_failed,
            batch_id=batch_id,
        )
        if self._publisher is not None:
            fresh = [
                job.job_id
                for job, outcome in zip(jobs, outcomes, strict=True)
                if outcome in ("queued", "requeued")
            ]
            await asyncio.to_thread(self._publisher.publish, fresh, batch_id)

    async def submit(self, job: JobLike, *, retry_failed: bool = False) -> AsyncJobHandle:
        """Send one job (see ``ChalkClient.submit``)."""
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
        """Send many jobs in a few pipelined round trips (see ``ChalkClient.submit_batch``)."""
        prepared = [prepare_job(job) for job in jobs]
        first: dict[str, PreparedJob] = {}
        for job in prepared:
            first.setdefault(job.job_id, job)
        batch_id = batch_id or "b-" + uuid.uuid4().hex
        waiter = new_waiter()
        await self._submit(list(first.values()), waiter, retry_failed, batch_id)
        return AsyncBatch(self.store, batch_id, [job.job_id for job in prepared], waiter)

    async def get(self, job_id: str) -> JobResult | None:
        """The job's result, or ``None`` while it has none."""
        return (await self.store.results([job_id]))[0]

    async def job(self, job_id: str) -> AsyncJobHandle:
        """A handle on a job submitted earlier; raises ``QueueError`` if unknown."""
        waiter = new_waiter()
        if await self.store.watch([job_id], waiter) == ["unknown"]:
            raise QueueError(f"no job {job_id!r} in the cluster (never submitted, or expired)")
        return AsyncJobHandle(self.store, job_id, waiter)

    async def batch(self, batch_id: str) -> AsyncBatch:
        """A batch submitted earlier, to wait on again; raises ``QueueError`` if unknown."""
        ids = await self.store.batch_ids(batch_id)
        if not ids:
            raise QueueError(f"no batch {batch_id!r} in the cluster (never submitted, or expired)")
        waiter = new_waiter()
        await self.store.watch(list(dict.fromkeys(ids)), waiter)
        return AsyncBatch(self.store, batch_id, ids, waiter)

    async def close(self) -> None:
        """Close the connections."""
        await self.store.redis.aclose()
        if self._publisher is not None:
            self._publisher.close()

    async def __aenter__(self) -> AsyncChalkClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.close()
