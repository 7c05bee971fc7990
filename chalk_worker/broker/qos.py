"""kombu's acknowledgement emulation for Chalk's channel: held lists, and patience.

A message taken from the Chalk queue with ``BLMOVE`` is in its consumer's held
list from that moment: ``QoS.append`` notes on its job that it was taken,
``ack`` removes it from the list, ``reject`` removes it or gives it back.
Elsewhere (fanout, other queues) kombu's own records are used. A write Redis
refuses (out of memory, a read-only replica) is retried, with the worker
taking nothing else meanwhile, until the worker is told to stop.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Protocol

import redis
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from kombu.utils.json import dumps
from redis.exceptions import OutOfMemoryError, ReadOnlyError

from chalk_client.cluster import keys
from chalk_client.cluster.messages import HeldEntry
from chalk_worker.broker import background
from chalk_worker.cluster import delivery, finisher, shutdown
from chalk_worker.cluster.leases import describe_trouble

log = logging.getLogger(__name__)

RETRY_MAX_S = 10.0
"""Longest wait between two attempts to record a taken message."""


class BrokerConnection(Protocol):
    """What the log reads of a kombu connection."""

    ssl: object
    hostname: str | None
    port: int | None
    virtual_host: str | None


class TakenMessage(Protocol):
    """What the acknowledgement emulation reads of a kombu message."""

    delivery_info: dict[str, object]
    _raw: object


def broker_url_of(connection: BrokerConnection) -> str:
    """The Redis URL of a kombu connection, for the log (without the password)."""
    scheme = "rediss" if connection.ssl else "redis"
    return f"{scheme}://{connection.hostname}:{connection.port}/{connection.virtual_host or 0}"


SHUTTING_DOWN = shutdown.REQUESTED
"""Set by ``chalk_worker.app`` when Celery tells the worker to stop (warm or cold)."""


def shutdown_requested() -> bool:
    """Whether the worker was told to stop."""
    return SHUTTING_DOWN.is_set()


def _wait_out(exc: Exception, url: str, doing: str, delay: float) -> float:
    """Log Redis refusing a write (out of memory, read-only) and sleep; the next delay."""
    log.warning(
        "%s; this worker takes no other message until then, retrying in %.0f s",
        describe_trouble(exc, url, doing),
        delay,
    )
    deadline = time.monotonic() + delay
    while time.monotonic() < deadline and not shutdown_requested():
        time.sleep(0.1)
    return min(delay * 2, RETRY_MAX_S)


class Rate:
    """How many events in the last ``WINDOW_S`` seconds (acknowledgements, here)."""

    WINDOW_S = 1.0

    def __init__(self) -> None:
        self._times: deque[float] = deque()

    def note(self) -> None:
        self._times.append(time.monotonic())

    def per_second(self) -> float:
        horizon = time.monotonic() - self.WINDOW_S
        while self._times and self._times[0] < horizon:
            self._times.popleft()
        return len(self._times) / self.WINDOW_S


class QoS(kombu_redis.QoS):  # type: ignore[misc]
    """kombu's acknowledgement emulation: held lists on the Chalk queue, and patience.

    On a channel that takes messages with ``BLMOVE`` (``Channel.consumer`` set), a
    message is in the consumer's held list from the moment it left the queue:
    ``append`` notes on its job that it was taken, ``ack`` removes it from the
    list, ``reject`` removes it or gives it back. Elsewhere kombu's own records are
    used, retried while Redis refuses writes.
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self._held: dict[str, bytes] = {}
        self._jobs: dict[str, str] = {}
        """The job of each held message (its acknowledgement waits for the job's result)."""
        self.acked = Rate()

    take_ahead = 0
    """Messages taken beyond the prefetch count (``Channel`` sets it: see ``TakeAhead``)."""

    def can_consume(self) -> bool:
        """Whether to take more: room for at least half the take-ahead (or for one, with
        none): far from Redis, a take of one or two costs as long a round trip as a full
        one, and slots would wait through it."""
        room = self.can_consume_max_estimate()
        return room is None or room >= max(1, self.take_ahead // 2)

    def can_consume_max_estimate(self) -> int | None:
        """How many to take at most (``None``: no limit)."""
        count = int(self.prefetch_count or 0)
        if not count:
            return None
        return max(count + self.take_ahead - (len(self._delivered) - len(self._dirty)), 0)

    def append(self, message: TakenMessage, delivery_tag: str) -> None:
        """Record a taken message as unacknowledged (in the held list, or kombu's hash)."""
        channel = self.channel
        raw = getattr(channel, "taken_raw", None)
        consumer = getattr(channel, "consumer", None)
        if raw is None or consumer is None:
            self._append_unacked(message, delivery_tag)
            return
        self._held[delivery_tag] = raw
        virtual.QoS.append(self, message, delivery_tag)
        job = getattr(message, "chalk_job", None)
        if job is not None:
            self._jobs[delivery_tag] = job[0]
        if job is None or not delivery.NOTE_RECEIPTS:
            return
        delay = 1.0
        while True:
            try:
                channel.held_messages().receive(job[0], job[1], consumer)
                return
            except (OutOfMemoryError, ReadOnlyError) as exc:
                if shutdown_requested():
                    return  # held in Redis: given back when this consumer closes or lapses
                delay = _wait_out(exc, channel.broker_url, "noting a message taken", delay)

    def _append_unacked(self, message: TakenMessage, delivery_tag: str) -> None:
        """kombu's record of a taken message; until then it is only in this process."""
        record = super().append
        delay = 1.0
        while True:
            try:
                record(message, delivery_tag)
                return
            except (OutOfMemoryError, ReadOnlyError) as exc:
                url = broker_url_of(self.channel.connection.client)
                if shutdown_requested():
                    log.error(
                        "shutting down while %s: a message taken from the queue could not be "
                        "kept and is dropped; push it back with LPUSH %s once Redis takes "
                        "writes: %s",
                        describe_trouble(exc, url, "recording it"),
                        message.delivery_info.get("routing_key"),
                        dumps(message._raw),
                    )
                    raise
                delay = _wait_out(exc, url, "recording a message taken from the queue", delay)

    def ack(self, delivery_tag: str) -> None:
        """Acknowledge: remove the message from the held list (or kombu's records)."""
        consumer = getattr(self.channel, "consumer", None)
        if consumer is None:
            super().ack(delivery_tag)
            return
        raw = self._held.pop(delivery_tag, None)
        job_id = self._jobs.pop(delivery_tag, None)
        self.acked.note()
        if raw is not None and background.ACKS.enabled:  # a worker: sent from another thread
            held = self.channel.held_messages()
            send = partial(
                background.ACKS.send,
                background.Command(
                    held.redis,
                    ("LREM", keys.held(consumer), 1, raw),
                    partial(delivery.REGISTRY.ack_later, consumer, raw),
                ),
            )
            # Not before the job's result is stored (chalk_worker.cluster.finisher).
            if job_id is None or not finisher.PENDING.after_stored(job_id, send):
                send()
        elif raw is not None:
            try:
                self.channel.held_messages().ack(consumer, raw)
            except redis.RedisError as exc:
                # Redis keeps the entry until this keeper sends the ack (or, should this
                # worker die first, gives it back: its job has a result and it is dropped).
                log.warning("acknowledging a message failed (%s); will retry", exc)
                delivery.REGISTRY.ack_later(consumer, raw)
        virtual.QoS.ack(self, delivery_tag)

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        """Reject: drop the message, or give it back to the queue (``requeue``)."""
        consumer = getattr(self.channel, "consumer", None)
        if consumer is None:
            super().reject(delivery_tag, requeue=requeue)
            return
        raw = self._held.pop(delivery_tag, None)
        self._jobs.pop(delivery_tag, None)
        if raw is not None:
            held = self.channel.held_messages()
            if requeue:
                entry = HeldEntry.parse(raw)
                held.give_back(consumer, [entry], fresh=False)
            else:
                held.ack(consumer, raw)
        virtual.QoS.ack(self, delivery_tag)

    def restore_unacked(self, client: redis.Redis | None = None) -> list[object] | None:
        """kombu's restore at close: on a held list, done by ``Channel.close`` (all of it)."""
        if getattr(self.channel, "consumer", None) is not None:
            self._delivered.clear()
            return []
        restored: list[object] | None = super().restore_unacked(client)
        return restored

    @contextmanager
    def pipe_or_acquire(
        self, pipe: redis.client.Pipeline | None = None, client: redis.Redis | None = None
    ) -> Iterator[redis.client.Pipeline]:
        """kombu's pipeline for acks and records, without ``MULTI`` (see the module's doc)."""
        if pipe:
            yield pipe
            return
        with self.channel.conn_or_acquire(client) as acquired:
            yield acquired.pipeline(transaction=False)
