"""Messages a worker took from the queue: held in Redis until acknowledged, given back if it dies.

A worker process takes a message with one atomic ``BLMOVE`` from the queue into
a list of its own (``chalk:held:CONSUMER``), the reliable-queue pattern: from the
moment it leaves the queue a message is in Redis, in a list that names who took
it, whether or not its job has started and whatever dies next (the worker, its
connection, Redis itself: a ``BLMOVE`` is one command, in the AOF or not). The
worker then notes on the job that its latest message was taken (``RECEIVE``),
and removes the message from its list when Celery acknowledges it.

Each consumer (a kombu channel consuming the Chalk queue) is registered in
``chalk:consumers`` with a liveness deadline that its process renews with its
leases. A consumer whose deadline passed is dead: any worker gives its held
messages back to the queue, each in one script (``RESTORE``) that removes it from
the list and pushes a new message for the job, unless the job is done, runs
elsewhere, or was already sent again. A consumer whose channel closes (a lost
connection, a shutdown) gives its own messages back the same way, at once, or
through its keeper once Redis answers again.
"""

from __future__ import annotations

import ast
import base64
import json
import logging
import os
import socket
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from chalk_client import keys
from chalk_client.broker import TASK_NAME, queue_message
from chalk_client.scripts import (
    ALL,
    CONSUMERS,
    DEAD_CONSUMERS,
    FORGET_CONSUMER,
    RECEIVE,
    RESTORE,
    Script,
)
from chalk_client.store import merge_replies, run_script

log = logging.getLogger(__name__)

GIVE_BACK_BATCH = 1000
"""Most held messages given back per round trip."""
DEAD_BATCH = 100
"""Most dead consumers handled per keeper tick."""
MAX_ROUNDS = 10
"""Most rounds of giving back one consumer's messages (a live one may take more)."""


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
        return cls(raw, job_id, task_id, _batch_label(headers.get("kwargsrepr")))


def _batch_label(kwargsrepr: object) -> str:
    """The batch a message was labelled with (``kwargsrepr`` is ``"{'batch': 'ID'}"``)."""
    if not isinstance(kwargsrepr, str) or "batch" not in kwargsrepr:
        return ""
    try:
        found = ast.literal_eval(kwargsrepr)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return ""
    batch = found.get("batch") if isinstance(found, dict) else None
    return batch if isinstance(batch, str) else ""


@dataclass(frozen=True)
class LostAttempt:
    """A message whose worker died: its job was sent again as ``new_task_id``."""

    job_id: str
    task_id: str
    new_task_id: str
    reason: str


@dataclass
class ConsumerRegistry:
    """This process's consumers: those whose liveness it renews, and what it owes Redis.

    ``open`` consumers take messages now; ``closing`` ones belong to channels that
    closed while Redis could not take their messages back; ``unsent_acks`` are
    acknowledgements Redis did not get. The keeper finishes both once Redis answers.
    """

    open: dict[str, str] = field(default_factory=dict)
    closing: dict[str, str] = field(default_factory=dict)
    unsent_acks: list[tuple[str, bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    token: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    count: int = 0

    def new(self, queue: str) -> str:
        """A new consumer of ``queue``; its id names the queue, this host and process."""
        with self.lock:
            self.count += 1
            consumer = f"{queue}@{socket.gethostname()}:{os.getpid()}:{self.token}:{self.count}"
            self.open[consumer] = queue
        return consumer

    def renewable(self) -> list[str]:
        """Every consumer whose liveness this process keeps."""
        with self.lock:
            return [*self.open, *self.closing]

    def close(self, consumer: str, *, given_back: bool) -> None:
        """A consumer's channel closed; its messages are given back, or still to give back."""
        with self.lock:
            queue = self.open.pop(consumer, None) or self.closing.get(consumer)
            if given_back:
                self.closing.pop(consumer, None)
            elif queue is not None:
                self.closing[consumer] = queue

    def to_give_back(self) -> list[tuple[str, str]]:
        """Closed consumers whose held messages are still to give back: ``(consumer, queue)``."""
        with self.lock:
            return list(self.closing.items())

    def ack_later(self, consumer: str, raw: bytes) -> None:
        """Remember an acknowledgement Redis did not take."""
        with self.lock:
            self.unsent_acks.append((consumer, raw))

    def take_unsent_acks(self) -> list[tuple[str, bytes]]:
        """The acknowledgements still to send (the caller sends or returns them)."""
        with self.lock:
            acks, self.unsent_acks = self.unsent_acks, []
        return acks


REGISTRY = ConsumerRegistry()
"""This process's consumers (made again in a forked child: it has none)."""


def _forget_after_fork() -> None:
    global REGISTRY
    REGISTRY = ConsumerRegistry()


os.register_at_fork(after_in_child=_forget_after_fork)


def queue_of(consumer: str) -> str:
    """The queue a consumer takes from (its id is ``QUEUE@host:pid:token:n``)."""
    return consumer.rsplit("@", 1)[0]


class HeldMessages:
    """The Redis side of held messages: register consumers, receive, acknowledge, give back."""

    def __init__(self, client: redis.Redis, *, lease_ms: int) -> None:
        self.redis = client
        self.lease_ms = lease_ms

    def _pipeline(self, build: Any) -> list[Any]:
        """Run what ``build`` queues in one round trip, loading the scripts if Redis forgot them."""
        pipe = self.redis.pipeline(transaction=False)
        build(pipe)
        replies: list[Any] = pipe.execute(raise_on_error=False)
        if any(isinstance(reply, redis.exceptions.NoScriptError) for reply in replies):
            for script in ALL:
                self.redis.script_load(script.text)
            pipe = self.redis.pipeline(transaction=False)
            build(pipe)
            replies = merge_replies(replies, pipe.execute(raise_on_error=False))
        return replies

    def run(self, script: Script, keys_: Sequence[str], args: Sequence[Any]) -> Any:
        """Run one script (loaded again if Redis forgot it); its reply, or its error raised."""
        reply = self._pipeline(lambda pipe: run_script(pipe, script, keys_, args))[0]
        if isinstance(reply, Exception):
            raise reply
        return reply

    def register(self, consumers: Sequence[str]) -> None:
        """Register consumers, or renew them: their liveness runs a lease from now."""
        if consumers:
            self.run(CONSUMERS, [keys.CONSUMERS], [self.lease_ms, *consumers])

    def receive(self, job_id: str, task_id: str, consumer: str) -> None:
        """Note on the job that ``consumer`` took its latest message."""
        self.run(
            RECEIVE,
            [keys.job(job_id), keys.PENDING, keys.taken(queue_of(consumer))],
            [job_id, task_id, consumer],
        )

    def ack(self, consumer: str, raw: bytes) -> None:
        """Remove an acknowledged message from the consumer's held list."""
        self.redis.lrem(keys.held(consumer), 1, raw)  # type: ignore[arg-type]

    def held(self, consumer: str) -> list[bytes]:
        """The messages a consumer holds, oldest first (at most ``GIVE_BACK_BATCH``)."""
        found: Any = self.redis.lrange(keys.held(consumer), -GIVE_BACK_BATCH, -1)
        return [entry if isinstance(entry, bytes) else entry.encode() for entry in reversed(found)]

    def give_back(
        self, consumer: str, entries: Sequence[HeldEntry], *, fresh: bool
    ) -> list[tuple[HeldEntry, str, str]]:
        """Give held messages back to the queue, each in one script; per entry the outcome
        (``requeued``, or why it was dropped) and the task id it was sent as.

        ``fresh``: send each job as a new message (a new task id: the dead consumer's
        attempt is reported lost), else the entry itself (a live consumer giving back
        what it took and did not start).
        """
        queue = queue_of(consumer)
        sent: list[str] = []

        def build(pipe: Any) -> None:
            sent.clear()
            for entry in entries:
                message, task_id = "", entry.task_id
                if fresh and entry.job_id:
                    message, task_id = queue_message(entry.job_id, queue, entry.batch or None)
                sent.append(task_id)
                run_script(
                    pipe,
                    RESTORE,
                    [
                        keys.held(consumer),
                        keys.job(entry.job_id),
                        keys.result(entry.job_id),
                        keys.RUNNING,
                        keys.owner(entry.job_id),
                        keys.PENDING,
                    ],
                    [entry.raw, entry.job_id, entry.task_id, message, task_id, queue],
                )

        if not entries:
            return []
        replies = self._pipeline(build)
        error = next((reply for reply in replies if isinstance(reply, Exception)), None)
        if error is not None:
            raise error
        return [
            (entry, _text(reply), task_id)
            for entry, reply, task_id in zip(entries, replies, sent, strict=True)
        ]

    def give_back_all(self, consumer: str, *, fresh: bool) -> list[LostAttempt]:
        """Give back every message the consumer holds, then forget the consumer.

        Returns the attempts a dead consumer lost (``fresh``): their jobs were sent again.
        """
        lost: list[LostAttempt] = []
        for _ in range(MAX_ROUNDS):
            entries = [HeldEntry.parse(raw) for raw in self.held(consumer)]
            outcomes = self.give_back(consumer, entries, fresh=fresh)
            for entry, outcome, task_id in outcomes:
                if outcome == "requeued" and fresh:
                    lost.append(LostAttempt(entry.job_id, entry.task_id, task_id, "worker died"))
                elif outcome == "dropped":
                    log.warning(
                        "dropped an entry held by %s that is not a chalk.score message: %.300r",
                        consumer,
                        entry.raw,
                    )
            forgotten = self.run(
                FORGET_CONSUMER,
                [keys.held(consumer), keys.CONSUMERS],
                [consumer, "0" if fresh else "1"],
            )
            if forgotten or not entries:
                break
        return lost

    def dead_consumers(self) -> list[str]:
        """Consumers whose liveness lapsed: their processes stopped renewing it."""
        found = self.run(DEAD_CONSUMERS, [keys.CONSUMERS], [DEAD_BATCH])
        return [_text(consumer) for consumer in found]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
