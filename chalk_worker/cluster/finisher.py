"""Results stored from a thread of their own, many per round trip.

A worker's slot that scored a job hands its result to the ``Finisher`` and
takes its next job at once: it never waits a round trip for Redis to take the
result. The finisher stores every result waiting in one pipeline (one ``FINISH``
script each, as before: the first result of a job is its one result). Until its
result is stored, a job stays this worker's: its lease is renewed, and its
message is acknowledged only after (``PENDING``: Celery's acknowledgement of a
job whose result waits is held back and sent once it is stored). Should the
worker die meanwhile, the message is still held in Redis and the job's lease
lapses: the job is sent again and scored by another worker, as for any job a
dead worker held.

Redis trouble that passes by itself (``describe_trouble``) is retried with a
backoff; when the worker is told to stop, retrying ends at the shutdown's grace
period (``give_up``), and the results not stored are left to that path.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Protocol

import redis

from chalk_client.jobs import JobResult
from chalk_worker.cluster.leases import LeaseStore, describe_trouble
from chalk_worker.cluster.rounds import Rounds

log = logging.getLogger(__name__)

MAX_PER_ROUND = 200
"""Most results stored in one pipeline."""
RETRY_MAX_S = 30.0


class PendingResults:
    """Jobs whose result waits to be stored, and what to do once it is (process-wide)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._after: dict[str, list[Callable[[], None]]] = {}

    def add(self, job_id: str) -> None:
        """``job_id``'s result waits to be stored."""
        with self._lock:
            self._after.setdefault(job_id, [])

    def after_stored(self, job_id: str, action: Callable[[], None]) -> bool:
        """Run ``action`` once ``job_id``'s result is stored; ``False`` (and nothing kept)
        if no result of that job waits: the caller runs it now."""
        with self._lock:
            actions = self._after.get(job_id)
            if actions is None:
                return False
            actions.append(action)
            return True

    def done(self, job_id: str) -> None:
        """``job_id``'s result is stored (or given up): run what waited for it."""
        with self._lock:
            actions = self._after.pop(job_id, [])
        for action in actions:
            action()

    def forget(self, job_id: str) -> None:
        """``job_id``'s result will not be stored here: drop what waited for it (its
        message stays held, and is given back when the worker's channel closes)."""
        with self._lock:
            self._after.pop(job_id, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._after)


PENDING = PendingResults()
"""This process's results waiting to be stored (a forked child has none)."""


def _after_fork() -> None:
    global PENDING
    PENDING = PendingResults()


os.register_at_fork(after_in_child=_after_fork)


class Stored(Protocol):
    """What the finisher tells its runtime of each result: ``written`` (``False``: the job
    already had one), or ``None`` with the error if it could not be stored, and
    whether that was giving up (the worker stops; the job is left to be sent again)."""

    def __call__(
        self,
        result: JobResult,
        written: bool | None,
        error: BaseException | None,
        gave_up: bool = False,
    ) -> None: ...


class Finisher:
    """Stores results handed to it, in rounds of up to ``MAX_PER_ROUND``."""

    def __init__(
        self,
        leases: LeaseStore,
        owner: str,
        url: str,
        stored: Stored,
        give_up: threading.Event | None = None,
    ) -> None:
        self.leases = leases
        self.owner = owner
        self.url = url
        self.stored = stored
        self.give_up = give_up or threading.Event()
        """Set when the worker stops and its grace period is over: retry no more."""
        self._rounds: Rounds[JobResult] = Rounds(
            "chalk-finisher", self._store, max_per_round=MAX_PER_ROUND
        )

    def submit(self, result: JobResult) -> None:
        """Store ``result`` (soon, with others); returns at once."""
        PENDING.add(result.job_id)
        self._rounds.put(result)

    def unstored(self) -> int:
        """How many results wait to be stored."""
        return self._rounds.pending()

    def flush(self, timeout: float) -> bool:
        """Wait until every result handed over was stored; ``False`` if time ran out."""
        return self._rounds.flush(timeout)

    def _store(self, results: list[JobResult]) -> None:
        """Store one round, retrying while Redis has trouble that passes by itself."""
        delay = 1.0
        while True:
            try:
                replies = self.leases.finish_many(results, self.owner)
                break
            except redis.RedisError as exc:
                trouble = describe_trouble(exc, self.url, f"storing {len(results)} result(s)")
                if trouble is None or self.give_up.is_set():
                    self._give_up(results, exc)
                    return
                log.warning("%s; retrying in %.0f s", trouble, delay)
                if self.give_up.wait(delay):
                    self._give_up(results, exc)
                    return
                delay = min(delay * 2, RETRY_MAX_S)
        for result, reply in zip(results, replies, strict=True):
            if isinstance(reply, Exception):
                self.stored(result, None, reply)
            else:
                self.stored(result, reply, None)

    def _give_up(self, results: list[JobResult], error: BaseException) -> None:
        for result in results:
            self.stored(result, None, error, gave_up=self.give_up.is_set())
