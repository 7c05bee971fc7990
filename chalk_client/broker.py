"""Publishing ``chalk.score`` messages, sent by name: the client never imports the worker.

A message (``chalk_client.cluster.messages``) carries one job id. On a Redis broker (the default:
the broker is the store's Redis) the client writes kombu's message itself, in
the same Lua script that records the job, so recording and enqueueing happen
together or not at all. With another broker (``CHALK_BROKER_URL``, e.g.
RabbitMQ) a kombu producer publishes the same message after the job is recorded;
the record stays ``unpublished`` until the publish went through, and a failed
publish gives the record back (``chalk_client.cluster.submit.RELEASE``), so that
submitting the job again sends it. ``SubmitLedger`` counts what a submit has
queued, so that one stopped halfway names the jobs it has not.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import suppress
from typing import Any

import redis
from kombu import Connection
from kombu.transport import TRANSPORT_ALIASES

from chalk_client.cluster.connection import shown_url
from chalk_client.cluster.messages import EMBED, task_headers, task_queue
from chalk_client.errors import ChalkError, ConfigurationError, QueueError, QueueUnavailableError
from chalk_client.records import PreparedJob
from chalk_client.store_errors import store_error

RETRY_POLICY: dict[str, Any] = {"max_retries": 3}
"""How a publish rides out a broker that drops the connection (kombu's ``retry_policy``)."""


class KombuPublisher:
    """Publishes ``chalk.score`` messages through kombu, to any broker Celery supports.

    Thread-safe: publishes are serialised on one connection.
    """

    def __init__(self, broker_url: str, queue: str) -> None:
        scheme = broker_url.split("://", 1)[0].split("+", 1)[0] if "://" in broker_url else ""
        if scheme not in TRANSPORT_ALIASES:  # kombu would take "notaurl" for an AMQP host
            raise ConfigurationError(
                f"{shown_url(broker_url)!r} is not a broker URL; give one like "
                "amqp://user:password@host:5672// (RabbitMQ) or redis://host:6379/0 in "
                "CHALK_BROKER_URL"
            )
        self.broker_url = broker_url
        self.queue = task_queue(queue)
        self._connection: Connection | None = None
        self._lock = threading.Lock()

    def publish(self, job_ids: Iterable[str], batch: str | None = None) -> None:
        """Send one message per job id (the queue is declared first, as a worker would).

        Raises ``QueueUnavailableError`` if the broker cannot take them; its
        ``not_queued`` names the jobs whose message was not sent.
        """
        ids = list(job_ids)
        sent = 0
        with self._lock:
            try:
                for _ in self._publish(ids, batch):
                    sent += 1
            except BaseException as exc:
                self.close()  # the next publish connects afresh
                if not isinstance(exc, Exception):
                    raise
                raise QueueUnavailableError(
                    f"could not publish to the broker at {shown_url(self.broker_url)}: "
                    f"{str(exc).rstrip('.')}. "
                    "Is it running? Check CHALK_BROKER_URL.",
                    not_queued=tuple(ids[sent:]),
                ) from exc

    def _publish(self, job_ids: list[str], batch: str | None) -> Iterator[str]:
        """Publish each job's message, yielding its id once sent."""
        if self._connection is None:
            self._connection = Connection(self.broker_url)
        with self._connection.Producer(serializer="json") as producer:
            declare = [self.queue]
            for job_id in job_ids:
                task_id = str(uuid.uuid4())
                producer.publish(
                    [[job_id], {}, EMBED],
                    exchange="",
                    routing_key=self.queue.name,
                    headers=task_headers(job_id, task_id, batch),
                    correlation_id=task_id,
                    delivery_mode=2,
                    declare=declare,
                    retry=True,
                    retry_policy=RETRY_POLICY,
                )
                declare = []
                yield job_id

    def close(self) -> None:
        """Close the broker connection."""
        if self._connection is not None:
            connection, self._connection = self._connection, None
            with suppress(Exception):  # a broken connection may fail to close: dropped anyway
                connection.release()


FRESH = ("queued", "requeued")
"""Submit outcomes whose message the caller sends (with a broker other than Redis)."""
SHOWN = 5
"""Job ids named in a message; the others are counted."""


class SubmitLedger:
    """What one submit call has queued so far, so that a failure says what it has not.

    A job is queued once Redis recorded it with its message (a Redis broker),
    once its publish went through (another broker), or when it needed no
    message (``duplicate``, ``done``).
    """

    def __init__(
        self, job_ids: Sequence[str], batch_id: str | None, *, publishes: bool, url: str
    ) -> None:
        self.job_ids = list(job_ids)
        self.batch_id = batch_id
        self.publishes = publishes
        self.url = url
        self.queued: set[str] = set()

    def take(
        self, chunk: Sequence[PreparedJob], replies: Sequence[str | Exception]
    ) -> tuple[list[str], ChalkError | None]:
        """Note a chunk's replies; returns the ids to publish and the first error Redis gave."""
        fresh: list[str] = []
        error: ChalkError | None = None
        for job, reply in zip(chunk, replies, strict=True):
            if isinstance(reply, Exception):
                if error is None:
                    error = (
                        store_error(reply, self.url)
                        if isinstance(reply, redis.RedisError)
                        else QueueError(f"submitting job {job.job_id!r} failed: {reply}")
                    )
            elif self.publishes and reply in FRESH:
                fresh.append(job.job_id)
            else:
                self.queued.add(job.job_id)
        return fresh, error

    def failure(self, error: ChalkError) -> ChalkError:
        """``error`` again, saying how many jobs were submitted and which were not queued."""
        missing = [job_id for job_id in self.job_ids if job_id not in self.queued]
        if not missing:
            return error
        shown = ", ".join(repr(i) for i in missing[:SHOWN])
        shown += ", ..." if len(missing) > SHOWN else ""
        safe = "a job is never scored twice, and one already queued keeps its one result"
        if self.batch_id is None and len(self.job_ids) == 1:
            told = f"Job {shown} was not queued; submitting it again is safe: {safe}."
        else:
            total, left = len(self.job_ids), len(missing)
            batch = f" of batch {self.batch_id}" if self.batch_id else ""
            again = f" with submit_batch(jobs, batch_id={self.batch_id!r})" if self.batch_id else ""
            told = (
                f"{total - left} of {total} jobs{batch} were submitted; {left} "
                f"{'was' if left == 1 else 'were'} not queued ({shown}). Submitting "
                f"{'it' if left == 1 else 'them'} again, or the whole batch{again}, is safe: "
                f"{safe}."
            )
        if isinstance(error, QueueError):
            return error.saying(
                f"{error} {told}", not_queued=tuple(missing), batch_id=self.batch_id
            )
        return error.saying(f"{error} {told}")
