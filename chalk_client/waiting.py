"""What the sync and asyncio clients share about waiting: waiters, slices, messages.

A waiter is a token naming one handle's or batch's done list: the worker that
finishes a job pushes its id there, and the waiter blocks on it in slices short
enough for Ctrl-C to be heard.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from chalk_client.cluster.keys import DONE_TTL_S
from chalk_client.jobs import JobStatus

WAIT_SLICE_S = 2.0
"""Longest single blocking pop: under the client's socket timeout, and Ctrl-C is heard."""
RECONNECT_S = 120.0
"""How long a waiting client rides out an unreachable Redis (a restart) before giving up."""
STALE_AFTER_S = DONE_TTL_S / 2
"""A waiter that has not read its done list for this long reads its jobs' results instead:
announcements pushed meanwhile may have expired with the list."""

Progress = Callable[[int, int], object]
"""Called as ``progress(done, total)`` each time a batch's job finishes."""


def new_waiter() -> str:
    """A fresh waiter token: each handle or batch blocks on a list of its own."""
    return "w-" + uuid.uuid4().hex


def deadline_of(timeout: float | None) -> float | None:
    """When a wait of ``timeout`` seconds ends (``time.monotonic``), or ``None``: never."""
    return None if timeout is None else time.monotonic() + timeout


def next_slice(deadline: float | None) -> float:
    """How long the next blocking pop may wait: a slice, or less before the deadline."""
    if deadline is None:
        return WAIT_SLICE_S
    return min(WAIT_SLICE_S, deadline - time.monotonic())


def describe_state(status: JobStatus | None) -> str:
    """How a timeout message says where a job is."""
    if status is None:
        return (
            "not in the cluster: never submitted, expired, or its submit failed; submitting "
            "it again is safe"
        )
    return f"it is {status}"


def shown_ids(job_ids: list[str], count: int = 5) -> str:
    """The first ``count`` ids, quoted, and ``...`` if there are more."""
    return ", ".join(repr(i) for i in job_ids[:count]) + (", ..." if len(job_ids) > count else "")
