"""Messages of the queue: what a ``chalk.score`` message holds, built and read the same way
by clients and workers, and the one way a job's message is pushed back at the queue's head.

A message carries a job id and nothing else, in Celery's task protocol 2, as
kombu's Redis transport stores it in the queue's list. Its task id is also its
delivery tag: both name this one message. The batch it was sent in is only a
label for Flower (``kwargsrepr``).
"""

from __future__ import annotations

import ast
import base64
import json
import os
import socket
import uuid
from base64 import b64encode
from dataclasses import dataclass
from typing import Any, NamedTuple

from kombu import Exchange, Queue

from chalk_client.cluster.lanes import ENQUEUE

TASK_NAME = "chalk.score"
"""The one task of the cluster; its only argument is a job id."""

EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
"""The ``embed`` part of a task body: no callbacks, errbacks, chain or chord."""
ORIGIN = f"{os.getpid()}@{socket.gethostname()}"


def task_queue(name: str) -> Queue:
    """The queue the workers consume, declared identically by workers and clients."""
    return Queue(name, Exchange(name, type="direct"), routing_key=name)


def task_body(job_id: str) -> str:
    """The message body, in Celery's task protocol 2: ``[args, kwargs, embed]`` as JSON."""
    return json.dumps([[job_id], {}, EMBED])


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
        "origin": ORIGIN,
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


PUSH_HEAD = (
    ENQUEUE
    + """
-- Push a job's message at the head of its lane (taken next) and record it as the
-- job's latest (numbered from the push counter): a sign of life.
local function push_head(record, pending, pushes, id, queue, message, task, now)
  enqueue(queue, message, true)
  local seq = redis.call('INCR', pushes)
  redis.call('HSET', record, 'task', task, 'pushed', now, 'seq', seq, 'head', '1')
  redis.call('HDEL', record, 'received', 'holder')
  redis.call('ZADD', pending, now, id)
end
"""
)


@dataclass(frozen=True)
class HeldEntry:
    """What a held message says of itself: its job, task id and batch (``""`` if none)."""

    raw: bytes
    job_id: str
    task_id: str
    batch: str

    @classmethod
    def parse(cls, raw: bytes) -> HeldEntry:
        """Read a queue entry; one that is not a ``chalk.score`` message has no job id."""
        try:
            payload = json.loads(raw)
            headers = payload["headers"]
            if headers.get("task") != TASK_NAME:
                raise ValueError("not a chalk.score message")
            body = json.loads(base64.b64decode(payload["body"]))
            job_id = body[0][0]
            task_id = headers["id"]
            if not (isinstance(job_id, str) and isinstance(task_id, str)):
                raise ValueError("no job id")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            return cls(raw, "", "", "")
        return cls(raw, job_id, task_id, batch_label(headers.get("kwargsrepr")))


def batch_label(kwargsrepr: object) -> str:
    """The batch a message was labelled with (``kwargsrepr`` is ``"{'batch': 'ID'}"``)."""
    if not isinstance(kwargsrepr, str) or "batch" not in kwargsrepr:
        return ""
    try:
        found = ast.literal_eval(kwargsrepr)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return ""
    batch = found.get("batch") if isinstance(found, dict) else None
    return batch if isinstance(batch, str) else ""
