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

import logging
import os
import socket
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import redis

from chalk_client.cluster import keys
from chalk_client.cluster.delivery import (
    RestoreAnswer,
    queue_consumers,
    queue_dead_consumers,
    queue_forget_consumer,
    queue_receive,
    queue_restore,
    queue_watermarks,
)
from chalk_client.cluster.messages import HeldEntry, queue_message
from chalk_client.cluster.script import (
    Build,
    Pipeline,
    as_list,
    as_text,
    first_error,
    parse_kind,
    run_pipeline,
)

log = logging.getLogger(__name__)

GIVE_BACK_BATCH = 1000
"""Most held messages given back per round trip."""
MAX_ROUNDS = 10
"""Most rounds of giving back one consumer's messages (a live one may take more)."""


@dataclass(frozen=True)
class LostAttempt:
    """A message whose worker died: its job was sent again as ``new_task_id``."""

    job_id: str
    task_id: str
    new_task_id: str
    reason: str
    node: str = ""
    """The node name of the worker that took it (``""``: unknown)."""


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
    node: str = field(default_factory=lambda: f"worker@{socket.gethostname()}")
    """This worker's Celery node name (set when it starts), named in its consumers' ids."""

    def new(self, queue: str) -> str:
        """A new consumer of ``queue``; its id names the queue, this node and process."""
        with self.lock:
            self.count += 1
            consumer = keys.consumer_id(queue, self.node, os.getpid(), self.token, self.count)
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

NOTE_RECEIPTS = True
"""Whether a consumer notes on the job each message it takes (``RECEIVE``).

A pool that starts every job as soon as its message is taken (threads, solo)
turns it off: the start notes it instead, one script fewer per job. A pool that
holds messages before starting them (prefork's prefetch) needs it, so that the
reconciler knows those messages are with a live worker.
"""


def _forget_after_fork() -> None:
    global REGISTRY
    REGISTRY = ConsumerRegistry()


os.register_at_fork(after_in_child=_forget_after_fork)


def queue_of(consumer: str) -> str:
    """The queue a consumer takes from (its id is ``QUEUE@NAME:HOST:PID:TOKEN:N``)."""
    return keys.Consumer.parse(consumer).queue


class HeldMessages:
    """The Redis side of held messages: register consumers, receive, acknowledge, give back."""

    def __init__(self, client: redis.Redis, *, lease_ms: int) -> None:
        self.redis = client
        self.lease_ms = lease_ms

    def run(self, build: Build) -> object:
        """Run the one command ``build`` queues; its reply, or its error raised."""
        reply = run_pipeline(self.redis, build)[0]
        if isinstance(reply, Exception):
            raise reply
        return reply

    def register(self, consumers: Sequence[str]) -> None:
        """Register consumers, or renew them: their liveness runs a lease from now."""
        if consumers:
            self.run(lambda pipe: queue_consumers(pipe, list(consumers), self.lease_ms))

    def receive(self, job_id: str, task_id: str, consumer: str) -> None:
        """Note on the job that ``consumer`` took its latest message."""
        self.run(lambda pipe: queue_receive(pipe, job_id, task_id, consumer))

    def move_watermarks(self, taken: dict[str, int]) -> None:
        """Move each queue's watermark up to the push number of a message taken from it."""
        self.run(lambda pipe: queue_watermarks(pipe, taken))

    def ack(self, consumer: str, raw: bytes) -> None:
        """Remove an acknowledged message from the consumer's held list."""
        self.redis.lrem(keys.held(consumer), 1, raw)  # type: ignore[arg-type]

    def held(self, consumer: str) -> list[bytes]:
        """The messages a consumer holds, oldest first (at most ``GIVE_BACK_BATCH``)."""
        found = self.redis.lrange(keys.held(consumer), -GIVE_BACK_BATCH, -1)
        return [entry if isinstance(entry, bytes) else entry.encode() for entry in reversed(found)]

    def give_back(
        self, consumer: str, entries: Sequence[HeldEntry], *, fresh: bool
    ) -> list[tuple[HeldEntry, RestoreAnswer, str]]:
        """Give held messages back to the queue, each in one script; per entry the outcome
        (``requeued``, or why it was dropped) and the task id it was sent as.

        ``fresh``: send each job as a new message (a new task id: the dead consumer's
        attempt is reported lost), else the entry itself (a live consumer giving back
        what it took and did not start).
        """
        queue = queue_of(consumer)
        sent: list[str] = []

        def build(pipe: Pipeline) -> None:
            sent.clear()
            for entry in entries:
                message, task_id = "", entry.task_id
                if fresh and entry.job_id:
                    message, task_id = queue_message(entry.job_id, queue, entry.batch or None)
                sent.append(task_id)
                queue_restore(pipe, consumer, entry, message, task_id)

        if not entries:
            return []
        replies = run_pipeline(self.redis, build)
        error = first_error(replies)
        if error is not None:
            raise error
        return [
            (entry, parse_kind(RestoreAnswer, reply), task_id)
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
                if outcome is RestoreAnswer.REQUEUED and fresh:
                    node = keys.Consumer.parse(consumer).node
                    lost.append(
                        LostAttempt(entry.job_id, entry.task_id, task_id, "worker died", node)
                    )
                elif outcome is RestoreAnswer.DROPPED:
                    log.warning(
                        "dropped an entry held by %s that is not a chalk.score message: %.300r",
                        consumer,
                        entry.raw,
                    )
            forgotten = self.run(lambda pipe: queue_forget_consumer(pipe, consumer, own=not fresh))
            if forgotten or not entries:
                break
        return lost

    def dead_consumers(self) -> list[str]:
        """Consumers whose liveness lapsed: their processes stopped renewing it."""
        return [as_text(consumer) for consumer in as_list(self.run(queue_dead_consumers))]
