"""The queue behind the server: the embedded one in this process, or the cluster.

Every route scores through a ``ServerQueue``, whichever it is: one code path,
two transports, as for ``chalk score``. ``EmbeddedQueue`` runs the worker's
own runner on this process's scoring loop and keeps the latest results in
memory (``CHALK_SERVER_KEEP_RESULTS``); ``ClusterQueue`` sends jobs to the
cluster through an ``AsyncChalkClient`` and keeps nothing, so any number of
servers may stand behind one Redis and any of them answers for a job another
one took.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import uuid
from collections import Counter, OrderedDict, deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from chalk_client.async_client import AsyncChalkClient
from chalk_client.async_handles import AsyncJobHandle
from chalk_client.cluster.cancel import CancelOutcome, CancelReport, cancelled_result
from chalk_client.errors import QueueError, ResultTimeout
from chalk_client.jobs import (
    DEFAULT_PRIORITY,
    PRIORITIES,
    JobResult,
    JobStatus,
    Priority,
    ScoringJob,
)
from chalk_client.server.settings import ServerSettings
from chalk_client.settings import ChalkSettings
from chalk_client.waiting import new_waiter

if TYPE_CHECKING:
    from chalk_worker.sandbox.stopping import StopSwitch


def _size(result: JobResult) -> int:
    """What a result holds in memory, roughly: the outputs and texts in it, plus a little."""
    size = 512 + len(result.error or "")
    for step in result.steps or ([result.scoring] if result.scoring else []):
        for test in step.tests or ():
            size += len(test.stdout or "") + len(test.stderr or "") + 128
        if step.compile is not None:
            size += len(step.compile.stderr)
    return size


def new_batch_id() -> str:
    """A fresh batch id, in the form the client library gives them."""
    return "b-" + uuid.uuid4().hex


class ServerQueue(Protocol):
    """What the routes need of a queue; ``EmbeddedQueue`` and ``ClusterQueue`` are two."""

    where: str
    """``embedded`` or ``cluster``."""

    async def submit(
        self,
        jobs: Sequence[ScoringJob],
        batch_id: str | None,
        priority: Priority = DEFAULT_PRIORITY,
        callback_url: str | None = None,
    ) -> None:
        """Queue ``jobs`` (each with an id), as batch ``batch_id`` when one is given, at
        ``priority`` (for the jobs that name none), called back at ``callback_url`` once
        all have a result (a cluster only)."""

    async def cancel(self, batch_id: str) -> CancelReport | None:
        """Cancel the batch's unfinished jobs; ``None`` for a batch this queue does not know."""

    async def score(self, job: ScoringJob, timeout: float) -> JobResult:
        """Queue ``job`` and wait for its result; ``ResultTimeout`` after ``timeout`` s."""

    async def result(self, job_id: str) -> JobResult | None:
        """The job's result, or ``None`` while it has none."""

    async def status(self, job_id: str) -> JobStatus | None:
        """Where the job stands; ``None`` for a job this queue does not know."""

    async def batch_jobs(self, batch_id: str) -> list[str] | None:
        """The batch's job ids in order; ``None`` for a batch this queue does not know."""

    def stream(self, batch_id: str, job_ids: list[str], timeout: float) -> AsyncIterator[JobResult]:
        """Each result of the batch once, as it finishes; ``ResultTimeout`` after ``timeout``."""

    def warm(self) -> None:
        """Get ready for the first job without delaying the server's start."""

    async def health(self) -> dict[str, Any]:
        """Whether the queue can take work, for ``GET /health``."""

    async def close(self) -> None:
        """Let go of connections (and, embedded, cancel the jobs still running)."""


@dataclass
class _Entry:
    job: ScoringJob
    priority: Priority = DEFAULT_PRIORITY
    running: bool = False
    size: int = 0
    """Bytes its result holds, roughly (the programs' outputs)."""
    task: asyncio.Task[JobResult] = field(init=False)
    stop: StopSwitch | None = None
    """The switch of its run, once it runs (thrown by a cancel)."""
    inner: concurrent.futures.Future[JobResult] | None = None
    """Its run on the process's loop, once it runs."""
    cancelled_by: str | None = None
    """The batch whose cancel stopped it."""


class _PrioritySlots:
    """``concurrency`` slots, given to the waiting job of highest priority first (in the
    order they came within a priority)."""

    def __init__(self, size: int) -> None:
        self._free = size
        self._waiting: dict[int, deque[asyncio.Future[None]]] = {0: deque(), 1: deque(), 2: deque()}

    async def acquire(self, priority: Priority) -> None:
        if self._free > 0 and not any(self._waiting.values()):
            self._free -= 1
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._waiting[PRIORITIES.index(priority)]
        queue.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self.release()  # given a slot as it was cancelled: pass it on
            elif turn in queue:  # a release may have passed over it already (cancelled)
                queue.remove(turn)
            raise

    def release(self) -> None:
        for rank in (0, 1, 2):
            queue = self._waiting[rank]
            while queue:
                turn = queue.popleft()
                if not turn.done():
                    turn.set_result(None)
                    return
        self._free += 1


@dataclass
class _Memory:
    jobs: OrderedDict[str, _Entry] = field(default_factory=OrderedDict)
    batches: OrderedDict[str, list[str]] = field(default_factory=OrderedDict)


class EmbeddedQueue:
    """Jobs scored in this process by the worker's runner, ``concurrency`` at once.

    Results stay in memory, the latest ``keep`` of them; a job still queued or
    running is never forgotten. Restarting the server forgets them all: a
    queue that must outlive its server is a cluster (``CHALK_REDIS_URL``).
    """

    where = "embedded"

    def __init__(self, settings: ChalkSettings, keep: int, keep_bytes: int = 512 * 2**20) -> None:
        from chalk_worker.run.embedded import DEFAULT_CONCURRENCY

        self.settings = settings
        self.keep = keep
        self.keep_bytes = keep_bytes
        self._kept_bytes = 0
        self.concurrency = settings.embedded_concurrency or DEFAULT_CONCURRENCY
        self._memory = _Memory()
        self._slots: _PrioritySlots | None = None

    async def _score(self, entry: _Entry) -> JobResult:
        try:
            result = await self._run(entry)
        except asyncio.CancelledError:
            if entry.cancelled_by is None:
                raise  # the server stops
            result = cancelled_result(entry.job.id or "", entry.cancelled_by)
        entry.size = _size(result)
        self._kept_bytes += entry.size
        self._forget_oldest()
        return result

    async def _run(self, entry: _Entry) -> JobResult:
        from chalk_worker.run.runner import score_job_async, start_in_process
        from chalk_worker.sandbox.stopping import StopSwitch

        if self._slots is None:
            self._slots = _PrioritySlots(self.concurrency)
        slots = self._slots
        await slots.acquire(entry.job.priority or entry.priority)
        try:
            entry.running = True
            entry.stop = StopSwitch()
            entry.inner = start_in_process(
                score_job_async(entry.job, settings=self.settings, stop=entry.stop)
            )
            try:
                return await asyncio.wrap_future(entry.inner)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # score_job_async turns a job's troubles into results
                job_id = entry.job.id or ""
                return JobResult(job_id=job_id, status=JobStatus.FAILED, error=repr(exc))
        finally:
            slots.release()

    def _start(self, job: ScoringJob, priority: Priority = DEFAULT_PRIORITY) -> _Entry:
        assert job.id is not None
        known = self._memory.jobs.get(job.id)
        if known is not None:  # the same id is scored once
            return known
        entry = _Entry(job, priority)
        entry.task = asyncio.create_task(self._score(entry))
        self._memory.jobs[job.id] = entry
        self._forget_oldest()
        return entry

    def _forget_oldest(self) -> None:
        jobs = self._memory.jobs
        for _ in range(len(jobs)):
            if len(jobs) <= self.keep and self._kept_bytes <= self.keep_bytes:
                break
            job_id, entry = next(iter(jobs.items()))
            jobs.move_to_end(job_id)
            if entry.task.done():
                del jobs[job_id]
                self._kept_bytes -= entry.size
        batches = self._memory.batches
        while len(batches) > self.keep:
            batches.popitem(last=False)

    async def submit(
        self,
        jobs: Sequence[ScoringJob],
        batch_id: str | None,
        priority: Priority = DEFAULT_PRIORITY,
        callback_url: str | None = None,
    ) -> None:
        if callback_url is not None:  # the routes refuse it first: this queue sends none
            raise ValueError("the embedded queue sends no callbacks")
        for job in jobs:
            self._start(job, priority)
        if batch_id is not None:
            self._memory.batches[batch_id] = [job.id for job in jobs if job.id is not None]

    async def cancel(self, batch_id: str) -> CancelReport | None:
        job_ids = self._memory.batches.get(batch_id)
        if job_ids is None:
            return None
        outcomes: Counter[CancelOutcome] = Counter()
        for job_id in dict.fromkeys(job_ids):
            entry = self._memory.jobs.get(job_id)
            if entry is None:
                outcomes[CancelOutcome.MISSING] += 1
            elif entry.task.done():
                outcomes[CancelOutcome.DONE] += 1
            else:
                outcomes[CancelOutcome.RUNNING if entry.running else CancelOutcome.QUEUED] += 1
                entry.cancelled_by = batch_id
                if entry.inner is not None:
                    entry.inner.cancel()
                if entry.stop is not None:
                    threading.Thread(target=entry.stop.throw, daemon=True).start()
                entry.task.cancel()
        return CancelReport(batch_id, outcomes)

    async def score(self, job: ScoringJob, timeout: float) -> JobResult:
        entry = self._start(job)
        try:
            return await asyncio.wait_for(asyncio.shield(entry.task), timeout)
        except TimeoutError:
            raise ResultTimeout(f"job {job.id!r} has no result after {timeout:g} s") from None

    async def result(self, job_id: str) -> JobResult | None:
        entry = self._memory.jobs.get(job_id)
        if entry is None or not entry.task.done() or entry.task.cancelled():
            return None
        return entry.task.result()

    async def status(self, job_id: str) -> JobStatus | None:
        entry = self._memory.jobs.get(job_id)
        if entry is None:
            return None
        if entry.task.done() and not entry.task.cancelled():
            return entry.task.result().status
        return JobStatus.RUNNING if entry.running else JobStatus.QUEUED

    async def batch_jobs(self, batch_id: str) -> list[str] | None:
        return self._memory.batches.get(batch_id)

    async def stream(
        self, batch_id: str, job_ids: list[str], timeout: float
    ) -> AsyncIterator[JobResult]:
        tasks = {}
        for job_id in dict.fromkeys(job_ids):
            entry = self._memory.jobs.get(job_id)
            if entry is not None:
                tasks[entry.task] = job_id
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        pending = set(tasks)
        while pending:
            left = deadline - loop.time()
            if left <= 0:
                raise ResultTimeout(
                    f"batch {batch_id}: {len(pending)} jobs have no result after {timeout:g} s"
                )
            done, pending = await asyncio.wait(
                pending, timeout=left, return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:
                if not task.cancelled():
                    yield task.result()

    def warm(self) -> None:
        """Find the toolchains now, in the background: the versions of eight compilers
        and runtimes are seconds the first program would otherwise wait."""
        from chalk_worker.judges.programs.languages import toolchains

        threading.Thread(target=toolchains, name="chalk-warm", daemon=True).start()

    async def health(self) -> dict[str, Any]:
        jobs = self._memory.jobs.values()
        unfinished = sum(1 for entry in jobs if not entry.task.done())
        return {"queue": "embedded", "ok": True, "unfinished_jobs": unfinished}

    async def close(self) -> None:
        from chalk_worker.sandbox import cleanup
        from chalk_worker.sandbox.workdirs import release_idle_areas

        unfinished = [e for e in self._memory.jobs.values() if not e.task.done()]
        for entry in unfinished:
            entry.task.cancel()
        await asyncio.gather(*(e.task for e in unfinished), return_exceptions=True)
        # A cancelled job's script (cancelled now, or by a cancel of its batch) runs on in
        # its thread: kill it, and wait until it has left its sandbox, before the
        # sandboxes' folders and mounts are removed. A thread per job: each may take
        # until its script dies (a job with none running returns at once).
        throws = [
            threading.Thread(target=e.stop.throw, name="chalk-stop", daemon=True)
            for e in self._memory.jobs.values()
            if e.stop is not None
        ]
        for thread in throws:
            thread.start()

        def join_all() -> None:
            for thread in throws:
                thread.join()

        await asyncio.to_thread(join_all)
        # Now, not at exit: uvicorn ends on the signal that stopped it, and atexit
        # handlers (which would remove the job folders' areas) do not run then.
        await asyncio.to_thread(cleanup.drain)
        release_idle_areas()


class ClusterQueue:
    """Jobs sent to the cluster (``CHALK_REDIS_URL``); everything lives in Redis."""

    where = "cluster"

    def __init__(self, settings: ChalkSettings) -> None:
        self.settings = settings
        self._client: AsyncChalkClient | None = None

    @property
    def client(self) -> AsyncChalkClient:
        """The client of the server's loop, made on first use."""
        if self._client is None:
            self._client = AsyncChalkClient(settings=self.settings)
        return self._client

    async def submit(
        self,
        jobs: Sequence[ScoringJob],
        batch_id: str | None,
        priority: Priority = DEFAULT_PRIORITY,
        callback_url: str | None = None,
    ) -> None:
        if (
            batch_id is None
            and len(jobs) == 1
            and priority == DEFAULT_PRIORITY
            and callback_url is None
        ):
            await self.client.submit(jobs[0])
        else:
            await self.client.submit_batch(
                jobs,
                batch_id=batch_id or new_batch_id(),
                priority=priority,
                callback_url=callback_url,
            )

    async def cancel(self, batch_id: str) -> CancelReport | None:
        try:
            batch = await self.client.batch(batch_id)
        except QueueError:
            return None
        return await batch.cancel()

    async def score(self, job: ScoringJob, timeout: float) -> JobResult:
        return await self.client.submit_and_wait(job, timeout)

    async def result(self, job_id: str) -> JobResult | None:
        return await self.client.get(job_id)

    async def status(self, job_id: str) -> JobStatus | None:
        handle = AsyncJobHandle(self.client.store, job_id, new_waiter(), watching=False)
        return await handle.status()

    async def batch_jobs(self, batch_id: str) -> list[str] | None:
        try:
            return (await self.client.batch(batch_id)).job_ids
        except QueueError:
            return None

    async def stream(
        self, batch_id: str, job_ids: list[str], timeout: float
    ) -> AsyncIterator[JobResult]:
        batch = await self.client.batch(batch_id)
        async for result in batch.as_completed(timeout):
            yield result

    def warm(self) -> None:
        """Nothing to ready: the workers run the programs."""

    async def health(self) -> dict[str, Any]:
        try:
            workers = await self.client.workers()
        except QueueError as exc:
            return {"queue": "cluster", "ok": False, "error": str(exc)}
        return {"queue": "cluster", "ok": True, "workers": len(workers)}

    async def close(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.close()
            self._client = None


def make_queue(settings: ChalkSettings, server: ServerSettings) -> ServerQueue:
    """The cluster's queue when ``CHALK_REDIS_URL`` is set, else the embedded one."""
    if settings.redis_url:
        return ClusterQueue(settings)
    return EmbeddedQueue(settings, server.keep_results, server.keep_results_mb * 2**20)
