"""Stopping jobs that have a result while this process still runs them: a cancelled batch's.

The client's half (``chalk_client.cluster.cancel``) gives a cancelled job its
result; the worker running it learns of it here: once a second, while the
process runs jobs, one round trip asks which of them have a result, and each
such job is stopped (``WorkerRuntime.stop_job``: its task cancelled, its
scripts killed). A job another worker finished meanwhile (its lease was lost)
is stopped the same way: its run here could only be dropped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Protocol

import redis

from chalk_client.cluster import keys

log = logging.getLogger(__name__)

CHECK_EVERY_S = 1.0
"""How often a process running jobs looks for those that have a result."""


class StoppableRuntime(Protocol):
    """What the watch needs of the worker's runtime."""

    def running_jobs(self) -> list[str]: ...
    def stop_job(self, job_id: str) -> bool: ...


def finished_among(client: redis.Redis, job_ids: Sequence[str]) -> list[str]:
    """Those of ``job_ids`` that have a result, in one round trip."""
    pipe = client.pipeline(transaction=False)
    for job_id in job_ids:
        pipe.exists(keys.result(job_id))
    return [job_id for job_id, found in zip(job_ids, pipe.execute(), strict=True) if found]


class CancelWatch(threading.Thread):
    """The thread that stops this process's jobs once they have a result."""

    def __init__(self, runtime: StoppableRuntime, client: redis.Redis) -> None:
        super().__init__(name="chalk-cancel-watch", daemon=True)
        self.runtime = runtime
        self.client = client
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(CHECK_EVERY_S):
            running = self.runtime.running_jobs()
            if not running:
                continue
            try:
                finished = finished_among(self.client, running)
            except redis.RedisError as exc:  # the keeper says what is wrong with Redis
                log.debug("could not look for cancelled jobs: %s", exc)
                continue
            for job_id in finished:
                if self.runtime.stop_job(job_id):
                    log.warning(
                        "job %s has a result while this worker scores it (its batch was "
                        "cancelled, or another worker finished it): stopped it",
                        job_id,
                    )
