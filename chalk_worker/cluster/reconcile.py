"""The reconciler: the job record is the source of truth, whatever happened to the messages.

Every unfinished job is in ``chalk:pending``, scored by when to look at it next
(a grace period, ``CHALK_RECONCILE_S``, after the last step of its life). One
worker at a time (a lock in Redis) looks at the jobs that are due, a bounded
number per pass, each in one script: a job that finished or was forgotten
leaves the index; one holding a live lease, taken by a live consumer, or
waiting in the queue is looked at again later (a job waiting in a long queue
less and less often). The rest lost their message, whatever lost it: a crash
between two writes, a Redis restart that lost its last second, a queue emptied
by hand. Each is sent again, in a script that first checks nothing happened to
the job since it was looked at.

Whether a message still waits in the queue is known without reading the queue:
messages are pushed at its tail and taken from its head, every push is numbered
(``chalk:pushes``), and the queue's watermark is the number of the latest
tail-pushed message taken. A job whose latest message was pushed before the
watermark, or into an empty queue, and that no consumer took, is not in the
queue any more. Numbers, not times: a clock set back cannot make a waiting job
look lost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import redis

from chalk_client.cluster import keys
from chalk_client.cluster.messages import queue_message
from chalk_client.cluster.reconcile import (
    RepublishAnswer,
    Stray,
    StrayKind,
    parse_republish,
    parse_strays,
    queue_claim_unpublished,
    queue_reconcile,
    queue_republish,
)
from chalk_client.cluster.submit import queue_published
from chalk_client.settings import ChalkSettings
from chalk_worker.cluster.delivery import HeldMessages, LostAttempt

log = logging.getLogger(__name__)

Publish = Callable[[str, str | None], str]
"""Publishes a job's message through a broker other than Redis: ``(job id, batch)`` -> task id."""


class Reconciler:
    """One pass at a time over the jobs due for a look (``run`` takes the cluster-wide lock)."""

    def __init__(self, held: HeldMessages, settings: ChalkSettings, owner: str) -> None:
        self.held = held
        self.redis: redis.Redis = held.redis
        self.settings = settings
        self.owner = owner

    def run(self, publish: Publish | None) -> list[LostAttempt]:
        """One pass, if no other worker runs one now; the jobs sent again.

        ``publish`` sends through another broker; ``None``: the queue is in this Redis.
        """
        interval_ms = max(self.settings.reconcile_ms // 4, 1)
        if not self.redis.set(keys.RECONCILER, self.owner, nx=True, px=interval_ms):
            return []
        sent: list[LostAttempt] = []
        for stray in self.strays():
            if stray.kind is StrayKind.UNPUBLISHED:
                if publish is not None and self._publish_unpublished(stray, publish):
                    sent.append(LostAttempt(stray.job_id, "", "", "its submit died"))
            elif publish is None:
                task_id = self._republish(stray)
                if task_id:
                    sent.append(LostAttempt(stray.job_id, stray.task_id, task_id, "message lost"))
        if sent:
            log.warning(
                "the reconciler sent again %d job(s) whose message was lost: %s",
                len(sent),
                ", ".join(one.job_id for one in sent[:10]),
            )
        return sent

    def strays(self) -> list[Stray]:
        """Look at the jobs due (re-scheduling the fine ones); those without a message."""
        grace_ms = self.settings.reconcile_ms
        return parse_strays(self.held.run(lambda pipe: queue_reconcile(pipe, grace_ms)))

    def _republish(self, stray: Stray) -> str:
        """Send a lost job again at the head of its queue; its new task id, or ``""``."""
        queue = stray.queue or self.settings.queue
        message = queue_message(stray.job_id, queue, stray.batch or None)
        answer = self.held.run(
            lambda pipe: queue_republish(pipe, stray, message.text, message.task_id, queue)
        )
        return message.task_id if parse_republish(answer) is RepublishAnswer.REQUEUED else ""

    def _publish_unpublished(self, stray: Stray, publish: Publish) -> bool:
        """Publish, through the other broker, a job whose submit died before publishing it."""
        claimed = self.held.run(lambda pipe: queue_claim_unpublished(pipe, stray, self.owner))
        if not claimed:
            return False
        publish(stray.job_id, stray.batch or None)
        self.held.run(lambda pipe: queue_published(pipe, [stray.job_id], self.owner))
        return True
