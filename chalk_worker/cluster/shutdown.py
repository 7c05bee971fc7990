"""A worker told to stop: what it finishes, how long it may take, and stopping at once.

Celery's warm shutdown (the first SIGTERM, or Ctrl+C) takes no new message and
waits for every running task, and so for every retry loop in them: a worker cut
off from Redis retried storing its results for ever and had to be killed. Here a
worker told to stop finishes the jobs it runs, as before, while Redis answers;
Redis silent for the grace period (``CHALK_SHUTDOWN_GRACE_S``, counted from the
stop or from the last time the worker reached Redis, whichever is later) ends it:

- retry loops (starting a job, storing a result) watch ``OVER`` and give up; a
  job not started stays in the worker's held list, a result not stored is
  dropped: Redis still has the job as leased to this worker, and once the lease
  lapses another worker scores it again;
- ``SETTLE_S`` later, should the worker still be alive (jobs still running,
  Celery itself waiting on a Redis it cannot reach), it stops at once;
- a second SIGTERM or Ctrl+C stops it at once.

Stopping at once stops the running jobs (their scripts killed, their LLM calls
abandoned) and ends the process with status 1. What it held in Redis (leases,
held messages) lapses and is given back by the other workers, as for a worker
that died: nothing is lost, nothing scored twice.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

log = logging.getLogger(__name__)

REQUESTED = threading.Event()
"""Set when the worker is told to stop (warm or cold)."""
OVER = threading.Event()
"""Set when its grace period is over: retry loops give up."""
SETTLE_S = 2.0
"""Time given, once the grace period is over, for loops to give up before stopping at once."""

POLL_S = 0.25
"""How often a stopping worker checks how long Redis has been silent."""

_begun = threading.Lock()
_stop_now: Callable[[str], None] | None = None
_last_contact = 0.0


def note_contact() -> None:
    """The worker reached Redis just now (the lease keeper says so every tick)."""
    global _last_contact
    _last_contact = time.monotonic()


class GaveUp(Exception):
    """Raised by a retry loop when the worker's grace period is over."""


def begin(grace_s: float, stop_now: Callable[[str], None]) -> None:
    """The worker was told to stop: watch how long Redis stays silent (the first call only).

    ``stop_now(reason)`` stops the worker at once; it is called once Redis was
    silent for ``grace_s`` while stopping, and by a second SIGTERM or SIGINT.
    """
    global _stop_now
    REQUESTED.set()
    if not _begun.acquire(blocking=False):
        return
    _stop_now = stop_now
    threading.Thread(target=_watch, args=(grace_s,), name="chalk-shutdown", daemon=True).start()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, _second_signal)


def _watch(grace_s: float) -> None:
    told = time.monotonic()
    while not OVER.wait(POLL_S):
        if time.monotonic() - max(told, _last_contact) >= grace_s:
            break
    else:
        return
    log.warning(
        "stopping, and Redis unreachable for the grace period of %g s "
        "(CHALK_SHUTDOWN_GRACE_S): giving up on it, stopping what still runs",
        grace_s,
    )
    OVER.set()
    threading.Event().wait(SETTLE_S)
    _call_stop_now(f"Redis unreachable for {grace_s:g} s while stopping")


def _second_signal(signum: int, frame: FrameType | None) -> None:
    OVER.set()
    threading.Thread(
        target=_call_stop_now,
        args=(f"told to stop again ({signal.Signals(signum).name})",),
        name="chalk-stop-now",
        daemon=True,
    ).start()


def _call_stop_now(reason: str) -> None:
    try:
        if _stop_now is not None:
            _stop_now(reason)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


def wait_or_give_up(delay: float, doing: str) -> None:
    """Sleep ``delay`` seconds between two tries at ``doing``; ``GaveUp`` if the grace
    period ends meanwhile (or had ended)."""
    if OVER.wait(delay):
        raise GaveUp(f"gave up {doing}: the worker is stopping and its grace period is over")
