"""The ``chalk.score`` task message, sent by name: the client never imports the worker.

A message carries one job id and nothing else. On a Redis broker (the default:
the broker is the store's Redis) the client writes kombu's message itself, in
the same Lua script that records the job, so recording and enqueueing happen
together or not at all. With another broker (``CHALK_BROKER_URL``, e.g.
RabbitMQ) a kombu producer publishes the same message after the job is recorded;
the record stays ``unpublished`` until the publish went through, and a failed
publish gives the record back (``chalk_client.scripts.RELEASE``), so that
submitting the job again sends it. ``SubmitLedger`` counts what a submit has
queued, so that one stopped halfway names the jobs it has not.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import uuid
from base64 import b64encode
from collections.abc import Iterable, Iterator, Sequence
from contextlib import suppress
from typing import Any, NamedTuple

import redis
from kombu import Connection, Exchange, Queue
from kombu.transport import TRANSPORT_ALIASES

from chalk_client.errors import ChalkError, ConfigurationError, QueueError, QueueUnavailableError
from chalk_client.records import PreparedJob
from chalk_client.store import shown_url, store_error

TASK_NAME = "chalk.score"
"""The one task of the cluster; its only argument is a job id."""

_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
_ORIGIN = f"{os.getpid()}@{socket.gethostname()}"


def task_queue(name: str) -> Queue:
    """The queue the workers consume, declared identically by workers and clients."""
    return Queue(name, Exchange(name, type="direct"), routing_key=name)


def task_body(job_id: str) -> str:
    """The message body, in Celery's task protocol 2: ``[args, kwargs, embed]`` as JSON."""
    return json.dumps([[job_id], {}, _EMBED])


def task_headers(job_id: str, task_id: str, batch: str | None = None) -> dict[str, Any]:
    """Celery's protocol-2 headers for one ``chalk.score`` message.

    ``argsrepr`` and ``kwargsrepr`` are what Celery and Flower show of the task:
    the job id, and the batch it was sent in (a label only: the message's real
    keyword arguments stay empty), so ``kwargs:batch=ID`` finds a batch in Flower.
    """
    return {
        "lang": "py",
        "task": TASK_NAME,
        "id": task_id,
        "shadow": None,
        "eta": None,
        "expires": None,
        "group": None,
        "group_index": None,
        "retries": 0,
        "timelimit": [None, None],
        "root_id": task_id,
        "parent_id": None,
        "argsrepr": repr([job_id]),
        "kwargsrepr": repr({"batch": batch}) if batch else "{}",
        "origin": _ORIGIN,
        "ignore_result": True,
        "replaced_task_nesting": 0,
        "stamped_headers": None,
        "stamps": {},
    }


class QueueMessage(NamedTuple):
    """One ``chalk.score`` message as it sits in a Redis queue, and its task id."""

    text: str
    task_id: str


def queue_message(job_id: str, queue: str, batch: str | None = None) -> QueueMessage:
    """A new message (a new task id) for ``job_id``, as kombu's Redis transport stores it.

    Its delivery tag is its task id: both name this one message.
    """
    task_id = str(uuid.uuid4())
    return QueueMessage(redis_message(job_id, queue, batch, task_id=task_id), task_id)


def redis_message(
    job_id: str, queue: str, batch: str | None = None, *, task_id: str | None = None
) -> str:
    """The message as kombu's Redis transport stores it in the queue's list."""
    task_id = task_id or str(uuid.uuid4())
    return json.dumps(
        {
            "body": b64encode(task_body(job_id).encode()).decode("ascii"),
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": task_headers(job_id, task_id, batch),
            "properties": {
                "correlation_id": task_id,
                "reply_to": "",
                "delivery_mode": 2,
                "delivery_info": {"exchange": "", "routing_key": queue},
                "priority": 0,
                "body_encoding": "base64",
                "delivery_tag": task_id,
            },
        }
    )


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
                error = QueueUnavailableError(
                    f"could not publish to the broker at {shown_url(self.broker_url)}: "
                    f"{str(exc).rstrip('.')}. "
                    "Is it running? Check CHALK_BROKER_URL."
                )
                error.not_queued = tuple(ids[sent:])
                raise error from exc

    def _publish(self, job_ids: list[str], batch: str | None) -> Iterator[str]:
        """Publish each job's message, yielding its id once sent."""
        if self._connection is None:
            self._connection = Connection(self.broker_url)
        with self._connection.Producer(serializer="json") as producer:
            declare = [self.queue]
            for job_id in job_ids:
                task_id = str(uuid.uuid4())
                producer.publish(
                    [[job_id], {}, _EMBED],
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
        wrapped = type(error)(f"{error} {told}")
        if isinstance(wrapped, QueueError):
            wrapped.not_queued = tuple(missing)
            wrapped.batch_id = self.batch_id
        return wrapped
