"""Where an integration's jobs are scored: in this process, or on a cluster.

``Embedded`` runs the worker's own runner here (``chalk_worker.score_jobs``,
loaded lazily: the one place besides ``chalk score`` where the client reaches
into the worker). ``Cluster`` sends the jobs as one batch through
``ChalkClient`` and waits for them. Either way a batch always comes back whole
and in order: a job that could not be scored, or sent, or waited for, is a
``failed`` result saying why, never an exception in the caller's training loop.
"""

from __future__ import annotations

from typing import Protocol

from chalk_client.async_client import AsyncChalkClient
from chalk_client.client import ChalkClient
from chalk_client.errors import ChalkError
from chalk_client.extras import require_worker
from chalk_client.jobs import JobResult, JobStatus, ScoringJob
from chalk_client.judge_specs import JudgeSpec
from chalk_client.settings import ChalkSettings


def failed_result(job_id: str, error: str) -> JobResult:
    """A ``failed`` result for a job this side could not have scored."""
    return JobResult(job_id=job_id, status=JobStatus.FAILED, error=error)


def _ids(jobs: list[ScoringJob]) -> list[str]:
    ids = [job.id for job in jobs]
    if None in ids:
        raise ValueError("every job sent by an integration has an id")
    return [i for i in ids if i is not None]


class Backend(Protocol):
    """Scores whole batches and returns every job's result in order."""

    def check(self, judge: JudgeSpec) -> None:
        """Raise now what every job with ``judge`` would fail with, where that can be known."""

    def score(self, jobs: list[ScoringJob], concurrency: int | None = None) -> list[JobResult]:
        """Score ``jobs``; their results in order.

        ``concurrency``, where given, replaces the backend's own cap on jobs in flight.
        """

    async def score_async(
        self, jobs: list[ScoringJob], concurrency: int | None = None
    ) -> list[JobResult]:
        """Score ``jobs`` without blocking the running event loop; their results in order.

        ``concurrency``, where given, replaces the backend's own cap on jobs in flight.
        """


class Embedded:
    """Jobs scored in this process, concurrently, by the worker's runner."""

    def __init__(self, settings: ChalkSettings | None, concurrency: int | None) -> None:
        require_worker("scoring in this process (no redis_url)")
        if concurrency is not None and concurrency < 1:
            raise ValueError(f"concurrency must be at least 1 (or None), not {concurrency}")
        self.settings = settings
        self.concurrency = concurrency

    def check(self, judge: JudgeSpec) -> None:
        """Unknown custom judges, refused commands and a missing LLM, as this process sees them."""
        from chalk_worker.run.embedded import check_judge

        check_judge(judge, self.settings)

    def score(self, jobs: list[ScoringJob], concurrency: int | None = None) -> list[JobResult]:
        """``chalk_worker.score_jobs`` on this process's event loop, ``concurrency`` at once."""
        from chalk_worker import score_jobs

        limit = concurrency or self.concurrency
        return score_jobs(jobs, concurrency=limit, settings=self.settings)

    async def score_async(
        self, jobs: list[ScoringJob], concurrency: int | None = None
    ) -> list[JobResult]:
        """``chalk_worker.score_jobs_async`` in the running loop, ``concurrency`` jobs at once."""
        from chalk_worker import score_jobs_async

        limit = concurrency or self.concurrency
        return await score_jobs_async(jobs, concurrency=limit, settings=self.settings)


class Cluster:
    """Jobs sent to a Chalk cluster as one batch each call, waited for up to ``timeout_s``.

    A job still unfinished then counts as failed here (it goes on on the
    cluster, and its result stays there); so does every job of a batch that
    could not be sent (Redis unreachable, out of memory).
    """

    def __init__(self, redis_url: str, timeout_s: float, settings: ChalkSettings | None) -> None:
        self.timeout_s = timeout_s
        self.settings = settings
        self.client = ChalkClient(redis_url, settings=settings)  # a malformed URL fails here
        self.redis_url = redis_url

    def check(self, judge: JudgeSpec) -> None:
        """Nothing to check here: what is registered is the workers' business."""

    def _complete(
        self, jobs: list[ScoringJob], found: dict[str, JobResult], problem: str | None
    ) -> list[JobResult]:
        why = problem or "no result"
        return [found.get(i) or failed_result(i, f"on the cluster: {why}") for i in _ids(jobs)]

    def score(self, jobs: list[ScoringJob], concurrency: int | None = None) -> list[JobResult]:
        """Submit ``jobs`` as one batch and collect their results as they finish.

        ``concurrency`` is the workers' business here, and ignored.
        """
        found: dict[str, JobResult] = {}
        problem = None
        try:
            batch = self.client.submit_batch(jobs)
            for result in batch.as_completed(self.timeout_s):
                found[result.job_id] = result
        except ChalkError as exc:
            problem = f"{type(exc).__name__}: {exc}"
        return self._complete(jobs, found, problem)

    async def score_async(
        self, jobs: list[ScoringJob], concurrency: int | None = None
    ) -> list[JobResult]:
        """``score`` through an ``AsyncChalkClient`` of the running loop, closed afterwards.

        ``concurrency`` is the workers' business here, and ignored.

        A client per call: a trainer's loop may end between calls, and a client left
        open on a closed loop leaks its connections.
        """
        found: dict[str, JobResult] = {}
        problem = None
        try:
            async with AsyncChalkClient(self.redis_url, settings=self.settings) as client:
                batch = await client.submit_batch(jobs)
                async for result in batch.as_completed(self.timeout_s):
                    found[result.job_id] = result
        except ChalkError as exc:
            problem = f"{type(exc).__name__}: {exc}"
        return self._complete(jobs, found, problem)
