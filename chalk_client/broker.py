"""The ``chalk.score`` task message, sent by name: the client never imports the worker.

A message carries one job id and nothing else. On a Redis broker (the default:
the broker is the store's Redis) the client writes kombu's message itself, in
the same Lua script that records the job, so recording and enqueueing happen
together or not at all. With another broker (``CHALK_BROKER_URL``, e.g.
RabbitMQ) a kombu producer publishes the same message after the job is recorded.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import uuid
from base64 import b64encode
from collections.abc import Iterable
from typing import Any

from kombu import Connection, Exchange, Queue

from chalk_client.errors import QueueUnavailableError

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


def redis_message(job_id: str, queue: str, batch: str | None = None) -> str:
    """The message as kombu's Redis transport stores it in the queue's list."""
    task_id = str(uuid.uuid4())
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
                "delivery_tag": str(uuid.uuid4()),
            },
        }
    )


class KombuPublisher:
    """Publishes ``chalk.score`` messages through kombu, to any broker Celery supports.

    Thread-safe: publishes are serialised on one connection.
    """

    def __init__(self, broker_url: str, queue: str) -> None:
        self.broker_url = broker_url
        self.queue = task_queue(queue)
        self._connection: Connection | None = None
        self._lock = threading.Lock()

    def publish(self, job_ids: Iterable[str], batch: str | None = None) -> None:
        """Send one message per job id (the queue is declared first, as a worker would)."""
        try:
            with self._lock:
                self._publish(list(job_ids), batch)
        except Exception as exc:
            url = Connection(self.broker_url).as_uri()  # hides the password
            raise QueueUnavailableError(
                f"could not publish to the broker at {url}: {exc}; is it running? "
                "Check CHALK_BROKER_URL."
            ) from exc

    def _publish(self, job_ids: list[str], batch: str | None) -> None:
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
                    retry_policy={"max_retries": 3},
                )
                declare = []

    def close(self) -> None:
        """Close the broker connection."""
        if self._connection is not None:
            self._connection.release()
            self._connection = None
