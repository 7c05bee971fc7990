"""Celery's events and the workers' acknowledgements, sent from threads of their own.

kombu publishes each fanout message (a task's ``received``, ``started`` and
``succeeded`` events, the worker's heartbeats) with one ``PUBLISH`` and waits for
the reply, and Celery flushes a worker's task events and acknowledges its
messages on its main loop, between taking messages. Near Redis that costs
little; 100 ms away it is four round trips per job on the one thread that takes
every message, and a worker took one job every 0.4 s whatever its concurrency.

In a worker the transport hands both to a ``BackgroundSender`` instead: a thread
sends everything waiting in one pipeline, in order, and the caller goes on at
once. ``EVENTS`` are for watching (Flower, ``celery events``): one Redis did not
take is dropped (as Redis drops a ``PUBLISH`` nobody listens to), and while Redis
is away at most ``MAX_WAITING`` wait, the oldest dropped first. ``ACKS`` are
never dropped: one Redis did not take goes to the keeper, which sends it once
Redis answers (``delivery.REGISTRY.ack_later``). An acknowledgement still
waiting is harmless: its job already has its result, so a copy of the message
given back would be dropped at its start. A channel that closes sends its
waiting acknowledgements before giving back what it holds (``flush``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from chalk_worker.cluster.rounds import Rounds

log = logging.getLogger(__name__)

MAX_WAITING = 10_000
"""Most events waiting to be published; the oldest go first beyond it."""
MAX_PER_ROUND = 500
"""Most commands in one pipeline."""
QUIET_S = 60.0
"""Least time between two log lines about events not published."""

Failed = Callable[[], None]
"""What to do with a command Redis did not take (``None``: drop it)."""


@dataclass(frozen=True)
class Command:
    """One command for one client, and what to do should it fail."""

    client: redis.Redis
    args: tuple[str | bytes | int, ...]
    failed: Failed | None = None


class BackgroundSender:
    """Sends commands from a daemon thread, in order, many per round trip."""

    def __init__(self, name: str, *, max_waiting: int | None = None) -> None:
        self.name = name
        self.enabled = False
        """Whether the transport hands its commands here (a worker sets it)."""
        self._rounds: Rounds[Command] = Rounds(
            name,
            self._send,
            max_per_round=MAX_PER_ROUND,
            max_waiting=max_waiting,
            overflow=lambda command: self._fail(command, None),
        )
        self._dropped = 0
        self._logged_at = float("-inf")

    def send(self, command: Command) -> None:
        """Queue ``command``; returns at once."""
        self._rounds.put(command)

    def flush(self, timeout: float) -> bool:
        """Wait until everything queued was sent (or failed); ``False`` if time ran out."""
        return self._rounds.flush(timeout)

    def _send(self, round_: list[Command]) -> None:
        """Send one round: one pipeline per client, in the order queued."""
        clients: dict[int, list[Command]] = {}
        for command in round_:
            clients.setdefault(id(command.client), []).append(command)
        for commands in clients.values():
            try:
                with commands[0].client.pipeline(transaction=False) as pipe:
                    for command in commands:
                        pipe.execute_command(*command.args)  # type: ignore[no-untyped-call]
                    replies = pipe.execute(raise_on_error=False)
            except redis.RedisError as exc:
                for command in commands:
                    self._fail(command, exc)
                continue
            for command, reply in zip(commands, replies, strict=True):
                if isinstance(reply, Exception):
                    self._fail(command, reply)

    def _fail(self, command: Command, error: BaseException | None) -> None:
        """A command Redis did not take: its ``failed``, or dropped (and logged, at times)."""
        if command.failed is not None:
            command.failed()
            return
        self._dropped += 1
        now = time.monotonic()
        if now - self._logged_at < QUIET_S:
            return
        self._logged_at = now
        why = f" ({error})" if error is not None else " (Redis away too long)"
        log.warning(
            "%d event(s) for Flower not published%s; scoring goes on, and so do events "
            "once Redis answers",
            self._dropped,
            why,
        )
        self._dropped = 0


EVENTS = BackgroundSender("chalk-events", max_waiting=MAX_WAITING)
"""This process's sender of Celery's events (a forked child gets one of its own)."""
ACKS = BackgroundSender("chalk-acks")
"""This process's sender of acknowledgements."""


def enable() -> None:
    """Send events and acknowledgements in the background (a worker calls this)."""
    EVENTS.enabled = ACKS.enabled = True


def _after_fork() -> None:
    global EVENTS, ACKS
    enabled = EVENTS.enabled
    EVENTS = BackgroundSender("chalk-events", max_waiting=MAX_WAITING)
    ACKS = BackgroundSender("chalk-acks")
    EVENTS.enabled = ACKS.enabled = enabled


os.register_at_fork(after_in_child=_after_fork)
