"""The keeper: what each worker process does every quarter lease, besides scoring.

It keeps this process's claims alive (its leases and its consumers' holds),
sends what Redis refused earlier (acknowledgements, given-back messages,
watermarks) and, after a full lease in touch with Redis, sends again the jobs
of workers that died (``Resender``): running jobs whose lease ran out, messages
dead consumers held, and, one worker at a time, jobs the reconciler finds
without a message. Flower is told about the attempts lost (``report_lost``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import redis

from chalk_client.cluster.connection import redacted
from chalk_client.cluster.leases import RequeueAnswer
from chalk_client.settings import ChalkSettings
from chalk_worker.cluster import delivery, shutdown
from chalk_worker.cluster.delivery import HeldMessages, LostAttempt
from chalk_worker.cluster.leases import LeaseStore, describe_trouble
from chalk_worker.cluster.reconcile import Publish, Reconciler

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resender:
    """How this worker sends jobs again, and tells Flower about the attempts it lost.

    ``publish`` sends a job's message through a broker other than Redis
    (``(job id, batch)`` -> task id); without it, messages go to ``queue`` in Redis,
    each in the same script that decides the job is to be sent again.
    """

    queue: str
    publish: Publish | None = None
    report_lost: Callable[[Sequence[LostAttempt]], None] = lambda lost: None


class KeptRuntime(Protocol):
    """What the keeper needs of a worker process's runtime (``consume.WorkerRuntime``)."""

    settings: ChalkSettings
    url: str
    owner: str
    """This process's name in leases and held lists."""
    leases: LeaseStore
    held_messages: HeldMessages
    reconciler: Reconciler

    def held(self) -> list[str]:
        """The jobs this process is scoring now."""

    def take_watermarks(self) -> dict[str, int]:
        """The highest push number taken per queue since the last call."""

    def note_taken(self, queue: str, seq: int) -> None:
        """A message with push number ``seq`` was taken from ``queue``."""


class LeaseKeeper(threading.Thread):
    """Keeps this process's claims alive and sends again the jobs of workers that died.

    Every quarter lease: renew this process's leases and consumers, send the
    acknowledgements and give back the held messages Redis refused earlier; then,
    after a full lease in touch with Redis, send again the jobs whose lease ran
    out, give back what dead consumers held, and now and then (one worker at a
    time) run the reconciler.
    """

    def __init__(self, runtime: KeptRuntime, resender: Resender) -> None:
        super().__init__(name="chalk-lease-keeper", daemon=True)
        self.runtime = runtime
        self.resender = resender
        self.interval = max(runtime.settings.lease_s / 4, 0.05)
        self.stopped = threading.Event()
        self._unreachable = False
        # Since when every tick reached Redis. Only after a full lease of it does this keeper
        # reap, so that live workers cut off by a Redis restart renew their leases first.
        self._in_touch_since: float | None = None
        self._next_reconcile = 0.0

    def run(self) -> None:
        """Renew and reap every quarter lease until stopped."""
        while not self.stopped.wait(self.interval):
            self.tick()

    def tick(self) -> None:
        """One round: renew our claims, then send again what dead workers left."""
        runtime = self.runtime
        try:
            self._send_acks()
            lost = runtime.leases.heartbeat(runtime.held(), runtime.owner)
            for job_id in lost:
                log.warning("job %s: lost its lease (another worker may score it too)", job_id)
            runtime.held_messages.register(delivery.REGISTRY.renewable())
            shutdown.note_contact()
            self._send_watermarks()
            self._give_back_closed()
            if self._unreachable:
                log.warning("Redis at %s is reachable again", redacted(runtime.url))
                self._unreachable = False
            if self._in_touch_since is None:
                self._in_touch_since = time.monotonic()
            if time.monotonic() - self._in_touch_since < runtime.settings.lease_s:
                return
            self._reap()
            self._give_back_dead()
            if time.monotonic() >= self._next_reconcile:
                self._next_reconcile = time.monotonic() + runtime.settings.reconcile_s / 4
                self.resender.report_lost(runtime.reconciler.run(self.resender.publish))
        except redis.RedisError as exc:
            self._unreachable = True
            self._in_touch_since = None
            trouble = describe_trouble(exc, runtime.url, "renewing and reaping leases")
            log.warning(
                "%s; retrying in %.1f s",
                trouble or f"Redis at {redacted(runtime.url)} failed renewing leases ({exc!r})",
                self.interval,
            )

    def _send_acks(self) -> None:
        """Acknowledgements Redis refused before (they are kept until it takes them)."""
        acks = delivery.REGISTRY.take_unsent_acks()
        for i, (consumer, raw) in enumerate(acks):
            try:
                self.runtime.held_messages.ack(consumer, raw)
            except redis.RedisError:
                for left in acks[i:]:
                    delivery.REGISTRY.ack_later(*left)
                raise

    def _send_watermarks(self) -> None:
        """Move the queues' watermarks to what this process's jobs took (once a tick)."""
        taken = self.runtime.take_watermarks()
        if not taken:
            return
        try:
            self.runtime.held_messages.move_watermarks(taken)
        except redis.RedisError:
            for queue, seq in taken.items():  # next tick, with whatever comes meanwhile
                self.runtime.note_taken(queue, seq)
            raise

    def _give_back_closed(self) -> None:
        """Messages of this process's closed channels that Redis could not take back then."""
        for consumer, _ in delivery.REGISTRY.to_give_back():
            self.runtime.held_messages.give_back_all(consumer, fresh=False)
            delivery.REGISTRY.close(consumer, given_back=True)
            log.warning("gave back the messages a closed channel of this worker held")

    def _reap(self) -> None:
        """Send again the jobs whose lease ran out: their worker stopped renewing it."""
        leases = self.runtime.leases
        expired = leases.reap()
        if not expired:
            return
        log.warning(
            "re-enqueueing %d job(s) whose worker stopped renewing its lease: %s",
            len(expired),
            ", ".join(one.job_id for one in expired[:10]),
        )
        lost: list[LostAttempt] = []
        if self.resender.publish is None:
            for one, answer, task_id in leases.requeue(expired, self.resender.queue):
                if answer is RequeueAnswer.REQUEUED and one.started:
                    lost.append(
                        LostAttempt(one.job_id, one.started, task_id, "worker died", one.node)
                    )
        else:
            token = f"{self.runtime.owner}:reaper"
            for one, answer in leases.claim_expired(expired, token):
                if answer is RequeueAnswer.CLAIMED:
                    task_id = self.resender.publish(one.job_id, one.batch or None)
                    leases.let_go(one.job_id, token)
                    if one.started:
                        lost.append(
                            LostAttempt(one.job_id, one.started, task_id, "worker died", one.node)
                        )
        self.resender.report_lost(lost)

    def _give_back_dead(self) -> None:
        """Give back to the queue the messages held by consumers whose process died."""
        mine = set(delivery.REGISTRY.renewable())
        held = self.runtime.held_messages
        for consumer in held.dead_consumers():
            if consumer in mine:
                continue  # cut off from Redis for a while: renewed again above
            lost = held.give_back_all(consumer, fresh=True)
            log.warning(
                "gave back the messages held by %s, whose worker stopped renewing it: "
                "%d job(s) sent again",
                consumer,
                len(lost),
            )
            self.resender.report_lost(lost)
