"""What a worker process does with one ``chalk.score`` message: plain Python, no Celery.

Per message: check the argument, take the job's lease (or find it already
scored, held by a live worker, or unknown: then drop the message), load the
record and archive, score the job with ``score_job_async`` on this process's
event loop, and write the one result. A malformed message is logged and
dropped; a record that cannot be read ends ``failed``; the worker goes on.
Redis trouble that passes by itself (a lost connection, Redis loading, out of
memory or read-only: ``describe_trouble``) is retried, and said so in the log
with what to do; a start or finish Redis refused has changed nothing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import redis
from pydantic import ValidationError
from redis.exceptions import ReadOnlyError

from chalk_client.cluster.connection import connect
from chalk_client.cluster.lanes import priority_of
from chalk_client.cluster.leases import BlobState, Start, StartOutcome
from chalk_client.errors import InvalidJobError, JobFailedError
from chalk_client.jobs import DEFAULT_PRIORITY, JobResult, JobStatus
from chalk_client.records import load_job
from chalk_client.settings import ChalkSettings
from chalk_worker import metrics
from chalk_worker.cluster import finisher, shutdown
from chalk_worker.cluster.callbacks import CallbackSender
from chalk_worker.cluster.cancel import CancelWatch
from chalk_worker.cluster.delivery import HeldMessages
from chalk_worker.cluster.finisher import Finisher
from chalk_worker.cluster.keeper import LeaseKeeper, Resender
from chalk_worker.cluster.leases import LeaseStore, describe_trouble
from chalk_worker.cluster.reconcile import Reconciler
from chalk_worker.metrics import MessageOutcome
from chalk_worker.run.process_loop import process_loop
from chalk_worker.run.runner import score_job_async
from chalk_worker.sandbox.stopping import StopSwitch
from chalk_worker.sandbox.workdirs import make_job_dir

log = logging.getLogger(__name__)
_T = TypeVar("_T")


@dataclass(frozen=True)
class Handled:
    """What ``WorkerRuntime.handle`` did with a message: its outcome and, if scored, the score."""

    outcome: MessageOutcome
    score: float | None = None

    def __str__(self) -> str:
        if self.outcome is MessageOutcome.SUCCEEDED:
            return f"succeeded, score {self.score}"
        return self.outcome.value


MAX_JOB_ID = 512
RETRY_MAX_S = 30.0


def message_job_id(args: Sequence[object], kwargs: Mapping[str, object]) -> str | None:
    """The job id a message carries, or ``None`` if its arguments are not one job id."""
    if len(args) == 1 and not kwargs:
        value = args[0]
    elif not args and set(kwargs) == {"job_id"}:
        value = kwargs["job_id"]
    else:
        return None
    if isinstance(value, str) and 0 < len(value) <= MAX_JOB_ID:
        return value
    return None


class WorkerRuntime:
    """One per worker process: the lease store, the held jobs and their keeper; and the
    sender of batch callbacks, on a thread of its own (a slow receiver never delays the
    keeper's renewals)."""

    def __init__(
        self,
        settings: ChalkSettings,
        url: str,
        resender: Resender,
        *,
        store_in_background: bool = False,
    ) -> None:
        self.settings = settings
        self.url = url
        self._client = client = connect(url)
        self.leases = LeaseStore(client, settings)
        self.held_messages = HeldMessages(client, lease_ms=int(settings.lease_s * 1000))
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.reconciler = Reconciler(self.held_messages, settings, self.owner)
        self._held: set[str] = set()
        self._running: dict[str, tuple[concurrent.futures.Future[JobResult], StopSwitch]] = {}
        self._taken: dict[str, int] = {}
        self._lock = threading.Lock()
        self.keeper = LeaseKeeper(self, resender)
        self.keeper.start()
        self.cancel_watch = CancelWatch(self, client)
        self.cancel_watch.start()
        self.callbacks = CallbackSender(client, settings, url, self.owner)
        self.callbacks.start()
        self.finisher: Finisher | None = None
        if store_in_background:  # a slot hands its result over and takes its next job
            self.finisher = Finisher(self.leases, self.owner, url, self._stored, shutdown.OVER)

    def held(self) -> list[str]:
        """The jobs this process is scoring now."""
        with self._lock:
            return list(self._held)

    def close(self) -> None:
        """Stop the keeper and the callback sender and close the connections to Redis (a
        worker's runtime lives as long as its process; this is for code that makes one of
        its own)."""
        self.keeper.stopped.set()
        self.cancel_watch.stopped.set()
        self.callbacks.stop()
        self.keeper.join(timeout=10)
        self.cancel_watch.join(timeout=10)
        self.callbacks.close()
        self._client.close()

    def running_jobs(self) -> list[str]:
        """The jobs this process scores now (on its event loop)."""
        with self._lock:
            return list(self._running)

    def stop_all(self, timeout: float) -> int:
        """Stop every job running here (``stop_job``), waiting up to ``timeout`` for their
        scripts to be killed; how many were stopped."""
        jobs = self.running_jobs()
        with self._lock:
            switches = [self._running[job][1] for job in jobs if job in self._running]
        for job_id in jobs:
            self.stop_job(job_id)
        deadline = time.monotonic() + timeout
        for switch in switches:
            switch.wait_stopped(max(0.0, deadline - time.monotonic()))
        return len(jobs)

    def stop_job(self, job_id: str) -> bool:
        """Stop scoring ``job_id`` here: its task is cancelled (its LLM calls abandoned) and
        its scripts killed, in a thread of its own. ``False`` if it was not running."""
        with self._lock:
            running = self._running.pop(job_id, None)
        if running is None:
            return False
        future, switch = running
        cancelled = future.cancel()
        threading.Thread(target=switch.throw, name=f"chalk-stop-{job_id[:32]}", daemon=True).start()
        return cancelled

    def note_taken(self, queue: str, seq: int) -> None:
        """A message with push number ``seq`` was taken from ``queue`` (see ``take_watermarks``)."""
        with self._lock:
            if seq > self._taken.get(queue, -1):
                self._taken[queue] = seq

    def take_watermarks(self) -> dict[str, int]:
        """The highest push number taken per queue since the last call (the keeper sends them)."""
        with self._lock:
            taken, self._taken = self._taken, {}
        return taken

    def retrying(self, what: str, action: Callable[[], _T]) -> _T:
        """``action()``, retried with backoff while Redis has trouble that passes by itself.

        That is Redis unreachable, loading, out of memory or read-only
        (``describe_trouble``); each retry is logged with what to do. Any other
        error is raised, and so is ``GaveUp`` once the worker was told to stop and
        its grace period is over. A script Redis refused has changed nothing, so
        running it again is safe.
        """
        delay = 1.0
        while True:
            try:
                return action()
            except redis.RedisError as exc:
                trouble = describe_trouble(exc, self.url, what)
                if trouble is None:
                    raise
                if isinstance(exc, ReadOnlyError):
                    # Pooled connections still lead to the old primary; new ones may not.
                    self.leases.redis.connection_pool.disconnect(inuse_connections=False)
                log.warning("%s; retrying in %.0f s", trouble, delay)
                shutdown.wait_or_give_up(delay, what)
                delay = min(delay * 2, RETRY_MAX_S)

    def handle(
        self, args: Sequence[object], kwargs: Mapping[str, object], node: str, task_id: str = ""
    ) -> Handled:
        """Process one message (in a task thread); returns what happened.

        That is a job scored here (``succeeded``, with its score), or why the
        message was dropped (``duplicate``, ``busy``, ``missing``, ``malformed``).
        A job scored here whose result is ``failed`` raises ``JobFailedError`` once
        the result is stored.
        """
        job_id = message_job_id(args, kwargs)
        if job_id is None:
            log.error(
                "dropping a chalk.score message with malformed arguments (args=%.200r, "
                "kwargs=%.200r): it takes exactly one job id (a string)",
                args,
                kwargs,
            )
            return Handled(MessageOutcome.MALFORMED)
        start = self.retrying(
            f"starting job {job_id}",
            lambda: self.leases.start(job_id, self.owner, task_id, node),
        )
        if start.outcome is StartOutcome.DONE:
            log.info("job %s already has a result; dropping this message", job_id)
            return Handled(MessageOutcome.DUPLICATE)
        if start.outcome is StartOutcome.BUSY:
            log.info("job %s is being scored by %s; dropping this copy", job_id, start.holder)
            return Handled(MessageOutcome.BUSY)
        if start.outcome is StartOutcome.MISSING:
            log.warning("no record of job %s (never submitted, or expired); dropping it", job_id)
            return Handled(MessageOutcome.MISSING)
        if start.taken is not None:
            self.note_taken(*start.taken)
        metrics.job_started(priority_of(start.lane) or DEFAULT_PRIORITY)
        worker = f"{node}:{os.getpid()}"
        switch = StopSwitch()
        future = process_loop().submit(self._score(job_id, start, worker, switch))
        with self._lock:
            self._held.add(job_id)
            self._running[job_id] = (future, switch)
        handed_over = False
        try:
            try:
                result = future.result()
            except concurrent.futures.CancelledError:
                log.info("job %s was stopped: it has a result (its batch was cancelled)", job_id)
                return Handled(MessageOutcome.CANCELLED)
            except BaseException:  # the wait interrupted: the job does not run on for nobody
                future.cancel()
                switch.throw()
                raise
            with self._lock:
                self._running.pop(job_id, None)
            if self.finisher is not None:
                self.finisher.submit(result)  # the job stays held until its result is stored
                handed_over = True
                return self._outcome(result)
            written = self.retrying(
                f"storing the result of job {job_id}",
                lambda: self.leases.finish(result, self.owner),
            )
        finally:
            with self._lock:
                if not handed_over:
                    self._held.discard(job_id)
                self._running.pop(job_id, None)
        if not written:
            log.info("job %s already had a result; this run's result is dropped", job_id)
            return Handled(MessageOutcome.DUPLICATE)
        metrics.job_scored(result)
        return self._outcome(result)

    @staticmethod
    def _outcome(result: JobResult) -> Handled:
        """What scoring a job came to; a ``failed`` result raises, so that Flower lists
        the task failed (its result is stored, or being stored)."""
        if result.status is JobStatus.FAILED:
            raise JobFailedError(f"job {result.job_id} failed: {result.error}")
        return Handled(MessageOutcome.SUCCEEDED, result.score)

    def _stored(
        self,
        result: JobResult,
        written: bool | None,
        error: BaseException | None,
        gave_up: bool = False,
    ) -> None:
        """The finisher stored ``result`` (or could not): the job is no longer held here."""
        job_id = result.job_id
        with self._lock:
            self._held.discard(job_id)
        if written:
            metrics.job_scored(result)
        elif written is False:
            log.info("job %s already had a result; this run's result is dropped", job_id)
        elif gave_up:
            log.warning(
                "the result of job %s was not stored before this worker stopped (%s); its "
                "message is given back and the job is scored again once its lease lapses",
                job_id,
                error,
            )
            finisher.PENDING.forget(job_id)
            return
        else:
            log.error("storing the result of job %s failed: %s", job_id, error)
        finisher.PENDING.done(job_id)

    async def _score(
        self, job_id: str, start: Start, worker: str, stop: StopSwitch | None = None
    ) -> JobResult:
        """The job's result: scored on this process's loop, or ``failed`` if unreadable."""

        def failed(error: str) -> JobResult:
            """A ``failed`` result saying ``error``."""
            log.error("job %s failed: %s", job_id, error)
            return JobResult(
                job_id=job_id,
                status=JobStatus.FAILED,
                error=error,
                attempts=start.attempts,
                worker=worker,
            )

        if start.blob is BlobState.MISSING:
            return failed(
                "the job's submission archive is no longer in Redis (kept CHALK_BLOB_TTL_S "
                "seconds); submit the job again with retry_failed=True"
            )
        try:
            job = load_job(start.record, start.archive)
        except ValidationError as exc:
            return failed(f"the job's record in Redis is not a valid job: {exc}")
        except InvalidJobError as exc:
            return failed(f"the job's record in Redis cannot be read: {exc}")
        except Exception as exc:  # any record that cannot be read ends failed, never retried
            return failed(f"the job's record in Redis cannot be read: {type(exc).__name__}: {exc}")
        if job.id != job_id:
            return failed(f"the job's record is for job {job.id!r}, not {job_id!r}")
        if start.blob is not BlobState.LARGE:
            return await score_job_async(
                job, settings=self.settings, attempts=start.attempts, worker=worker, stop=stop
            )
        # A large archive goes to disk in pieces and is unpacked from there.
        spool = make_job_dir(self.settings)
        try:
            archive = spool / "submission.tar"
            if not await asyncio.to_thread(self.leases.download, start.digest, archive):
                return failed(
                    "the job's submission archive is no longer in Redis (kept CHALK_BLOB_TTL_S "
                    "seconds); submit the job again with retry_failed=True"
                )
            return await score_job_async(
                job,
                settings=self.settings,
                attempts=start.attempts,
                worker=worker,
                archive_file=archive,
                stop=stop,
            )
        finally:
            await asyncio.to_thread(shutil.rmtree, spool, True)


_lock = threading.Lock()
_runtime: tuple[int, WorkerRuntime] | None = None


def worker_runtime(
    settings: ChalkSettings, url: str, resender: Resender, *, store_in_background: bool = False
) -> WorkerRuntime:
    """This process's runtime, made (and its keeper started) on first use, after any fork.

    ``store_in_background``: results are stored by the runtime's ``Finisher`` (a worker).
    """
    global _runtime
    with _lock:
        if _runtime is None or _runtime[0] != os.getpid():
            runtime = WorkerRuntime(
                settings, url, resender, store_in_background=store_in_background
            )
            _runtime = (os.getpid(), runtime)
        return _runtime[1]


def worker_runtime_if_made() -> WorkerRuntime | None:
    """This process's runtime, if it made one (``None``: it scored nothing yet)."""
    with _lock:
        if _runtime is not None and _runtime[0] == os.getpid():
            return _runtime[1]
        return None
