"""The embedded queue: many jobs scored concurrently in this process, no server needed.

The same runner as a worker's (``score_job_async``), fed from an iterable
instead of Redis: one runner, two transports. ``score_stream`` yields results
as they finish (``chalk score``); ``score_jobs`` returns them in job order (a
trainer scoring a batch), from any thread, on this process's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator

from chalk_client.custom import registered_context, registered_judge
from chalk_client.errors import UnknownJudgeError
from chalk_client.jobs import JobResult, ScoringJob
from chalk_client.judge_specs import (
    AllJudge,
    AnyJudge,
    CustomContext,
    CustomJudge,
    ExecutableJudge,
    JudgeSpec,
    RubricJudge,
)
from chalk_client.settings import ChalkSettings
from chalk_worker.judges.tasks_loader import failures_note, load_task_modules
from chalk_worker.run.runner import default_settings, score_job_async, start_in_process, wait_for
from chalk_worker.sandbox import cleanup
from chalk_worker.sandbox.workdirs import release_idle_areas

DEFAULT_CONCURRENCY = 32
"""Jobs in flight at once; subprocess judges are further capped at one per core."""

Progress = Callable[[int, int], object]
"""Called as ``progress(done, total)`` each time a job finishes."""


async def score_stream(
    jobs: Iterable[ScoringJob],
    *,
    settings: ChalkSettings | None = None,
    concurrency: int | None = None,
) -> AsyncGenerator[JobResult, None]:
    """Score ``jobs`` concurrently and yield each result as it finishes.

    ``jobs`` is consumed lazily, so a file of any length needs memory only for
    the jobs in flight. Ids repeated in ``jobs`` are scored once and yielded once.
    ``concurrency`` (jobs in flight) must be at least 1; ``None`` takes
    ``CHALK_EMBEDDED_CONCURRENCY``, or 32. Closing the iterator early (or
    cancelling its reader) cancels the jobs still in flight.
    """
    if concurrency is not None and concurrency < 1:
        raise ValueError(
            f"concurrency must be at least 1 (or None for the default), not {concurrency}"
        )
    settings = settings or default_settings()
    limit = concurrency or settings.embedded_concurrency or DEFAULT_CONCURRENCY
    pending: set[asyncio.Task[JobResult]] = set()
    seen: set[str] = set()
    source = iter(jobs)
    exhausted = False
    try:
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
    finally:
        for task in pending:
            task.cancel()
        if pending:
            # Let the cancelled jobs remove their folders before the caller goes on.
            await asyncio.gather(*pending, return_exceptions=True)


async def score_jobs_async(
    jobs: Iterable[ScoringJob],
    *,
    concurrency: int | None = None,
    progress: Progress | None = None,
    settings: ChalkSettings | None = None,
) -> list[JobResult]:
    """Score ``jobs`` concurrently in this process; their results, in job order.

    The batch form of ``score_job_async``, for a trainer's batch of rollouts:
    ``concurrency`` jobs in flight at once (``None``: ``CHALK_EMBEDDED_CONCURRENCY``,
    or 32), their LLM calls under the process's cap, scoring scripts at most one
    per core. Jobs without an id get one; the same id twice is scored once and
    its result stands at both places. ``progress(done, total)`` is called as
    each job finishes. Never raises for a job's content (see ``score_job``).
    """
    listed = [job.with_id() for job in jobs]
    total = len({job.id for job in listed})
    results: dict[str, JobResult] = {}
    stream = score_stream(listed, settings=settings, concurrency=concurrency)
    async with contextlib.aclosing(stream):
        async for result in stream:
            results[result.job_id] = result
            if progress is not None:
                progress(len(results), total)
    return [results[job.id] for job in listed if job.id is not None]


def score_jobs(
    jobs: Iterable[ScoringJob],
    *,
    concurrency: int | None = None,
    progress: Progress | None = None,
    settings: ChalkSettings | None = None,
) -> list[JobResult]:
    """Score ``jobs`` concurrently in this process; their results, in job order.

    ``score_jobs_async`` run on this process's event loop (the one ``score_job``
    and workers use), callable from any thread. ``progress(done, total)`` is
    called in the calling thread. Interrupting the call (Ctrl-C) cancels the
    jobs still in flight.
    """
    try:
        return _score_jobs(jobs, concurrency, progress, settings)
    finally:
        cleanup.drain()  # no job folder is left when it returns
        release_idle_areas()


def _score_jobs(
    jobs: Iterable[ScoringJob],
    concurrency: int | None,
    progress: Progress | None,
    settings: ChalkSettings | None,
) -> list[JobResult]:
    if progress is None:
        return wait_for(
            start_in_process(score_jobs_async(jobs, concurrency=concurrency, settings=settings))
        )
    updates: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()
    future = start_in_process(
        score_jobs_async(
            jobs,
            concurrency=concurrency,
            progress=lambda done, total: updates.put((done, total)),
            settings=settings,
        )
    )
    future.add_done_callback(lambda _: updates.put(None))
    try:
        while (update := updates.get()) is not None:
            progress(*update)
        return future.result()
    except BaseException:
        future.cancel()
        raise


def _parts(judge: JudgeSpec) -> Iterator[JudgeSpec]:
    yield judge
    if isinstance(judge, (AllJudge, AnyJudge)):
        for part in judge.judges:
            yield from _parts(part)


def check_judge(judge: JudgeSpec, settings: ChalkSettings | None = None) -> None:
    """Raise now what every job with ``judge`` would fail with in this process.

    That is: a custom judge or rubric context registered nowhere here
    (``UnknownJudgeError``), a command the operator's allowlist refuses
    (``CommandRefusedError``), a rubric judge with no LLM configured
    (``LLMUnavailableError``). A reward function checks its judge so once, when
    it is made, instead of failing every job of a training run.
    """
    settings = settings or default_settings()
    load_task_modules(settings)
    try:
        for part in _parts(judge):
            if isinstance(part, CustomJudge):
                registered_judge(part.name)
            elif isinstance(part, ExecutableJudge):
                from chalk_worker.sandbox.policy import check_command

                check_command(part.command, settings.allowed_commands)
            elif isinstance(part, RubricJudge):
                from chalk_worker.llm.client import LLMServer  # the LLM client only where needed

                LLMServer.from_settings(settings)
                for context in part.context:
                    if isinstance(context, CustomContext):
                        registered_context(context.name)
    except UnknownJudgeError as exc:
        raise UnknownJudgeError(f"{exc}.{failures_note()}") from None
