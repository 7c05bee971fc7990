"""``AsyncJobHandle`` and ``AsyncBatch``: what a submit returns, to wait on and read results.

Waiting never polls: the worker that finishes a job pushes its id to each
waiter's list, on which the waiter blocks; results already there are read at
once, so a zero timeout returns them too.

This module is the source of ``chalk_client.handles`` (``JobHandle`` and
``Batch``), which ``scripts/unasync.py`` generates from it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import suppress

from chalk_client.async_store import AsyncJobStore
from chalk_client.cluster.cancel import CancelReport
from chalk_client.errors import (
    ChalkError,
    QueueUnavailableError,
    ResultTimeout,
)
from chalk_client.jobs import JobResult, JobStatus
from chalk_client.summary import BatchSummary, summarize
from chalk_client.waiting import (
    RECONNECT_S,
    STALE_AFTER_S,
    Progress,
    deadline_of,
    describe_state,
    next_slice,
    shown_ids,
)


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

    async def cancel(self) -> CancelReport:
        """Cancel the batch: its jobs that have not started never will, those running are
        stopped (their scripts killed within 2 s), each ending ``cancelled``; results
        already written stay. A ``wait`` under way returns. Cancelling again, or a
        finished batch, changes nothing (the report says so)."""
        return await self._store.cancel_batch(self.id, self.job_ids)

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
