"""The job runner: collect the submission, score the steps, clean up.

``score_job`` is exactly what a worker does with a job, callable in-process.
A verdict (a zero and misbehaviour included) is ``succeeded``; ``failed``
means the system could not score, and ``error`` says why.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import mmap
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from chalk_client.errors import JudgeError, StudentMisbehaviorError
from chalk_client.jobs import JobResult, JobStatus, ScoringJob, Step
from chalk_client.judge_specs import (
    AllJudge,
    AlwaysPassJudge,
    AnyJudge,
    ExecutableJudge,
    JudgeSpec,
    RegexJudge,
    TestsJudge,
)
from chalk_client.scoring import Scoring, ZeroCause
from chalk_client.settings import ChalkSettings, ResolvedLimits
from chalk_worker.judges import JudgeContext, JudgeWaits, LLMBudget, evaluate
from chalk_worker.judges.tasks_loader import load_task_modules
from chalk_worker.run.process_loop import process_loop
from chalk_worker.sandbox import cleanup, stopping
from chalk_worker.sandbox.collect import unpack_submission
from chalk_worker.sandbox.stopping import StopSwitch
from chalk_worker.sandbox.workdirs import (
    job_dir_name,
    release_idle_areas,
    remove_job_folder,
    retire_job_folder,
    sweep_stale_job_dirs,
)

log = logging.getLogger(__name__)
_T = TypeVar("_T")


NO_FOLDER = Path("/dev/null/chalk-no-files")
"""The job folder judges see for a job that needs none (no submission, no script)."""
_prepared_pid: int | None = None


def _prepare_process(settings: ChalkSettings) -> None:
    """Once per process: import the task packages, remove job folders of dead workers."""
    global _prepared_pid
    load_task_modules(settings)
    if _prepared_pid != os.getpid():
        _prepared_pid = os.getpid()
        sweep_stale_job_dirs(settings)


_default_settings: tuple[tuple[tuple[str, str], ...], ChalkSettings] | None = None


def default_settings() -> ChalkSettings:
    """``ChalkSettings()`` of the environment, read again only when a ``CHALK_*`` variable changes.

    Reading the settings costs about 2 ms, as much as the rest of a small job:
    a hundred threads each calling ``score_job`` would spend it a hundred times.
    """
    global _default_settings
    variables = tuple(
        sorted((k, v) for k, v in os.environ.items() if k.upper().startswith("CHALK_"))
    )
    known = _default_settings
    if known is None or known[0] != variables:
        known = _default_settings = (variables, ChalkSettings())
    return known[1]


def worker_name() -> str:
    """This process's name in results: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _saved_submissions(
    step: Step, job: ScoringJob, submission_dir: Path, files: list[Path]
) -> tuple[Path, ...]:
    paths = step.submission_paths or job.submission_paths
    if paths:
        return tuple(submission_dir / path for path in paths)
    return tuple(files)


def _uses_files(judge: JudgeSpec) -> bool:
    if isinstance(judge, (ExecutableJudge, TestsJudge)):
        return True
    if isinstance(judge, (AllJudge, AnyJudge)):
        return any(_uses_files(part) for part in judge.judges)
    return False


def _judges(judge: JudgeSpec) -> list[JudgeSpec]:
    """``judge`` and, for ``all``/``any``, every judge inside it."""
    if isinstance(judge, (AllJudge, AnyJudge)):
        return [judge, *(inner for part in judge.judges for inner in _judges(part))]
    return [judge]


def _folder_on_first_script(job: ScoringJob, archive_file: Path | None) -> bool:
    """Whether the job's folder can wait for its first scoring script to make it.

    So for a job with nothing to unpack whose judges are scripts, regexes and
    passes only: none of them looks at the folder before a script runs, and the
    script's thread makes it (``workdirs.make_job_folder``), which saves the job a thread
    hop. Any other judge (a custom one, a rubric reading files) gets the folder
    made before the first step, as always.
    """
    if job.submission is not None or archive_file is not None:
        return False
    allowed = (ExecutableJudge, TestsJudge, RegexJudge, AlwaysPassJudge, AllJudge, AnyJudge)
    return all(
        isinstance(judge, allowed) for step in job.scored_steps() for judge in _judges(step.judge)
    )


def _needs_folder(job: ScoringJob) -> bool:
    """Whether the job touches the disk: a submission to unpack or a script to run.

    Regex, rubric-on-transcript, always-pass and custom judges without a
    submission need no folder, which saves a worker a folder and two thread hops
    a job.
    """
    return job.submission is not None or any(_uses_files(s.judge) for s in job.scored_steps())


def _collect(
    job: ScoringJob, job_dir: Path, limits: ResolvedLimits, archive_file: Path | None
) -> list[Path]:
    """Make the job's folder and unpack its submission there (one thread hop for both)."""
    job_dir.mkdir(mode=0o700)
    submission_dir = job_dir / "submission"
    submission_dir.mkdir()
    unpack = functools.partial(
        unpack_submission,
        dest=submission_dir,
        max_bytes=limits.unpack_bytes,
        max_entries=limits.unpack_entries,
        max_depth=limits.unpack_depth,
    )
    if archive_file is not None:
        # Mapped, not read: a large archive is never one more copy in memory.
        with open(archive_file, "rb") as handle:
            if os.fstat(handle.fileno()).st_size == 0:
                return unpack(b"")
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                return unpack(mapped)
    if job.submission is None:
        return []
    return unpack(job.submission.archive_bytes())


async def _score_steps(
    job: ScoringJob,
    job_dir: Path | None,
    limits: ResolvedLimits,
    settings: ChalkSettings,
    archive_file: Path | None,
    folder_on_first_script: bool,
) -> tuple[list[Scoring], dict[str, float]]:
    timings: dict[str, float] = {}
    started = time.perf_counter()
    # Without a folder, judges see no files: a path below /dev/null can never exist,
    # so nobody can plant files there to be graded.
    folder = job_dir or NO_FOLDER
    submission_dir = folder / "submission"
    try:
        files = []
        if job_dir is not None and not folder_on_first_script:
            files = await asyncio.to_thread(_collect, job, job_dir, limits, archive_file)
    except StudentMisbehaviorError as exc:
        timings["collect"] = time.perf_counter() - started
        return [Scoring.fail("misbehavior", str(exc), cause=ZeroCause.MISBEHAVIOR)], timings
    timings["collect"] = time.perf_counter() - started
    started = time.perf_counter()
    llm_budget = LLMBudget(settings.rubric_deadline_s)
    waits = JudgeWaits()
    steps: list[Scoring] = []
    for step in job.scored_steps():
        context = JudgeContext(
            transcript=job.transcript,
            saved_submissions=_saved_submissions(step, job, submission_dir, files),
            submission_dir=submission_dir,
            job_dir=folder,
            limits=limits,
            settings=settings,
            llm_budget=llm_budget,
            waits=waits,
        )
        try:
            scoring = await evaluate(step.judge, context)
        except StudentMisbehaviorError as exc:
            scoring = Scoring.fail("misbehavior", str(exc), cause=ZeroCause.MISBEHAVIOR)
        steps.append(scoring)
        if not scoring.continue_task:
            break
    timings["judge"] = time.perf_counter() - started
    if waits.sandbox_runs:
        timings["sandbox_wait"] = waits.sandbox_s  # a part of "judge"
    return steps, timings


async def score_job_async(
    job: ScoringJob,
    *,
    settings: ChalkSettings | None = None,
    attempts: int = 1,
    worker: str | None = None,
    archive_file: Path | None = None,
    stop: StopSwitch | None = None,
) -> JobResult:
    """Score one job in this process's event loop; see ``score_job``.

    ``archive_file`` holds the submission on disk instead of ``job.submission``
    (a worker streams large archives from Redis there). ``stop``: the job's stop
    switch, which kills its sandboxed runs when thrown (cancel its task too).
    """
    if stop is not None:  # the job's runs (and the threads they start) see the switch
        entered = stopping.CURRENT.set(stop)
        try:
            return await score_job_async(
                job,
                settings=settings,
                attempts=attempts,
                worker=worker,
                archive_file=archive_file,
            )
        finally:
            stopping.CURRENT.reset(entered)
    settings = settings or default_settings()
    job = job.with_id()
    assert job.id is not None
    started = time.perf_counter()
    _prepare_process(settings)
    steps: list[Scoring] = []
    timings: dict[str, float] = {}
    status, error = JobStatus.SUCCEEDED, None
    needs_folder = archive_file is not None or _needs_folder(job)
    on_first_script = needs_folder and _folder_on_first_script(job, archive_file)
    # Made by _collect, in a thread (the file system may keep a mkdir waiting), or by
    # the job's first script, in memory.
    job_dir = job_dir_name(settings, in_memory=on_first_script) if needs_folder else None
    try:
        limits = settings.resolve(job.limits)
        steps, timings = await _score_steps(
            job, job_dir, limits, settings, archive_file, on_first_script
        )
    except JudgeError as exc:
        status, error = JobStatus.FAILED, str(exc)
    except Exception as exc:
        log.error("job %s could not be scored:\n%s", job.id, traceback.format_exc())
        status, error = (
            JobStatus.FAILED,
            f"internal error while scoring: {type(exc).__name__}: {exc}",
        )
    finally:
        if job_dir is not None:  # after its scripts' scratch spaces, by the same cleaner
            retire_job_folder(job_dir)  # a script's thread started late may not make it again
            cleanup.later(functools.partial(remove_job_folder, job_dir))
    timings["total"] = time.perf_counter() - started
    return JobResult(
        job_id=job.id,
        status=status,
        scoring=steps[-1] if steps and status is JobStatus.SUCCEEDED else None,
        steps=steps,
        error=error,
        attempts=attempts,
        timings={name: round(seconds, 6) for name, seconds in timings.items()},
        worker=worker or worker_name(),
        metadata=job.metadata,
    )


def start_in_process(coroutine: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
    """Start ``coroutine`` on this process's event loop, the one workers score on.

    Every caller shares that loop and, through it, the LLM clients and their
    connections: a hundred threads scoring at once cost one loop, not a hundred.
    Called on that loop's own thread (a custom judge scoring a job, say), where
    waiting on the loop would wait forever, the coroutine gets a loop of its own
    in a thread of its own, whose LLM connections are closed when it ends.
    """
    shared = process_loop()
    if not shared.owns_current_thread():
        return shared.submit(coroutine)
    future: concurrent.futures.Future[_T] = concurrent.futures.Future()

    async def closing() -> _T:
        try:
            return await coroutine
        finally:
            llm = sys.modules.get("chalk_worker.llm.client")  # imported once a rubric judge ran
            if llm is not None:
                await llm.close_llm_clients()

    def target() -> None:
        try:
            future.set_result(asyncio.run(closing()))
        except BaseException as exc:
            future.set_exception(exc)

    future.set_running_or_notify_cancel()
    threading.Thread(target=target, name="chalk-score-job").start()
    return future


def wait_for(future: concurrent.futures.Future[_T]) -> _T:
    """The outcome of ``future``; if the wait is interrupted (Ctrl-C), the work is cancelled."""
    try:
        return future.result()
    except BaseException:
        future.cancel()
        raise


def score_job(job: ScoringJob, *, settings: ChalkSettings | None = None) -> JobResult:
    """Score ``job`` in this process, by the very code path a worker runs.

    Never raises for a job's content: misbehaviour and zeros are ``succeeded``
    results, system problems are ``failed`` results with ``error`` set.

    Safe to call from many threads at once, and made for it: every call runs on
    this process's one event loop (as a worker's jobs do), so concurrent calls
    share the LLM pool (``CHALK_LLM_MAX_IN_FLIGHT``) and its connections, and
    wait for the LLM together. Works inside a running event loop too (it blocks
    that loop's thread until the job is done; prefer ``score_job_async`` there).
    For many jobs at once from one thread, ``score_jobs``.
    """
    result = wait_for(start_in_process(score_job_async(job, settings=settings)))
    cleanup.drain()  # no job folder is left when it returns
    release_idle_areas()
    return result
