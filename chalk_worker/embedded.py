"""The embedded queue: many jobs scored concurrently in this process, no server needed.

The same runner as a worker's (``score_job_async``), fed from an iterable
instead of Redis: one runner, two transports.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable

from chalk_client.jobs import JobResult, ScoringJob
from chalk_client.settings import ChalkSettings
from chalk_worker.runner import score_job_async

DEFAULT_CONCURRENCY = 32
"""Jobs in flight at once; subprocess judges are further capped at one per core."""


async def score_stream(
    jobs: Iterable[ScoringJob],
    *,
    settings: ChalkSettings | None = None,
    concurrency: int | None = None,
) -> AsyncIterator[JobResult]:
    """Score ``jobs`` concurrently and yield each result as it finishes.

    ``jobs`` is consumed lazily, so a file of any length needs memory only for
    the jobs in flight. Ids repeated in ``jobs`` are scored once and yielded once.
    ``concurrency`` (jobs in flight) must be at least 1; ``None`` takes
    ``CHALK_EMBEDDED_CONCURRENCY``, or 32.
    """
    if concurrency is not None and concurrency < 1:
        raise ValueError(
            f"concurrency must be at least 1 (or None for the default), not {concurrency}"
        )
    settings = settings or ChalkSettings()
    limit = concurrency or settings.embedded_concurrency or DEFAULT_CONCURRENCY
    pending: set[asyncio.Task[JobResult]] = set()
    seen: set[str] = set()
    source = iter(jobs)
    exhausted = False
    while True:
        while not exhausted and len(pending) < limit:
            job = next(source, None)
            if job is None:
                exhausted = True
                break
            job = job.with_id()
            assert job.id is not None
            if job.id in seen:
                continue
            seen.add(job.id)
            pending.add(asyncio.create_task(score_job_async(job, settings=settings)))
        if not pending:
            return
        finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in finished:
            yield task.result()
