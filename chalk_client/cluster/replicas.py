"""Waiting for replicas: writes that must outlive a failover (``CHALK_REDIS_WAIT_REPLICAS``).

Redis replicates asynchronously: a master that dies can take with it the writes
its replicas had not received yet, and Sentinel then promotes a replica without
them. ``WAIT n timeout`` holds a connection until ``n`` replicas have every
write made on it so far (and, replication being in order, every write made
before them), or the timeout passes, and answers how many did.

With ``CHALK_REDIS_WAIT_REPLICAS=n`` (0 by default: no waiting):

- a submit returns only once ``n`` replicas have its jobs; otherwise it raises,
  and submitting again (safe: same ids, one result each) waits again;
- a worker acknowledges a job's message only after ``n`` replicas have its
  result or the timeout passed (then it logs that a failover may cost the
  result, and the job would be scored again);
- a client takes a job's result as final only after its own wait for ``n``
  replicas, so a result it has read is not lost by a failover after it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from chalk_client.cluster.script import Pipeline, as_int
from chalk_client.settings import ChalkSettings


def queue_wait(pipe: Pipeline, settings: ChalkSettings) -> None:
    """Queue ``WAIT`` for the replicas the settings ask for (nothing if none)."""
    if settings.redis_wait_replicas:
        timeout_ms = max(int(settings.redis_wait_timeout_s * 1000), 1)
        pipe.wait(settings.redis_wait_replicas, timeout_ms)


def with_wait(build: Callable[[Pipeline], object], settings: ChalkSettings, pipe: Pipeline) -> None:
    """Queue what ``build`` queues, then ``WAIT`` (see ``queue_wait``)."""
    build(pipe)
    queue_wait(pipe, settings)


def split_wait(
    replies: Sequence[object], settings: ChalkSettings
) -> tuple[list[object], str | None]:
    """The replies before ``WAIT``, and what is wrong if fewer replicas than asked had them.

    ``replies`` end with ``WAIT``'s answer when ``queue_wait`` queued it.
    """
    if not settings.redis_wait_replicas:
        return list(replies), None
    *before, answer = replies
    asked = settings.redis_wait_replicas
    if isinstance(answer, Exception):
        return before, f"Redis did not wait for its replicas ({answer})"
    confirmed = as_int(answer)
    if confirmed >= asked:
        return before, None
    return before, (
        f"only {confirmed} of the {asked} replica(s) CHALK_REDIS_WAIT_REPLICAS asks for "
        f"confirmed the write within {settings.redis_wait_timeout_s:g} s, so a failover now "
        "could lose it (see the replicas with `INFO replication` on the master, or lower "
        "CHALK_REDIS_WAIT_REPLICAS)"
    )
