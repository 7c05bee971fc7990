"""Small builders shared by the tests."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import redis
from prometheus_client import REGISTRY

from chalk_client import Message, ScoringJob, Transcript
from chalk_client.judges import CustomJudge
from chalk_worker import metrics

STARTED_MARKER = "chalk-test: started "
"""What a test script prints to stderr first, then ``warm`` or ``cold``."""
WARM_PROBE = (
    "import sys as _sys\n"
    f"print({STARTED_MARKER!r} + ('warm' if 'runpy' in _sys.modules else 'cold'), "
    "file=_sys.stderr, flush=True)\n"
)
"""A script's first lines: say how it started (a cold ``python script.py`` has no ``runpy``)."""


def say(*texts: str) -> Transcript:
    """A transcript in which the assistant said each text, in order."""
    return Transcript(messages=[Message(role="assistant", content=text) for text in texts])


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Wait for ``condition()``, checking every 50 ms; fail saying ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def survivors(marker: str) -> list[int]:
    """Host processes whose command line holds ``marker`` (PIDs inside differ from ours)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                    if marker.encode() in cmdline.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


def held_count(store: redis.Redis) -> int:
    """Messages workers took from the queue and have not acknowledged (all held lists)."""
    return sum(int(store.llen(key)) for key in store.scan_iter("chalk:held:*", count=1000))


def starts(how: str) -> float:
    """Scripts started so far in this process by ``how`` (``warm``, ``forked``, ``direct``).

    Counted by the worker's metrics, which this installs in the test's process (a
    worker installs them at start; ``score_job`` alone records nothing): call it
    once before the runs to count.
    """
    metrics.install()
    return REGISTRY.get_sample_value("chalk_sandbox_starts_total", {"how": how}) or 0.0


def logged_jobs(prefix: str, count: int, log: str | Path, sleep_s: float) -> list[ScoringJob]:
    """Jobs ``PREFIX-000``... whose judge (``test_log``, loaded by the tests' workers) writes
    its start and end to ``log`` and takes ``sleep_s``."""
    return [
        ScoringJob(
            id=f"{prefix}-{i:03d}",
            judge=CustomJudge(
                "test_log", {"log": str(log), "key": f"{prefix}-{i:03d}", "sleep_s": sleep_s}
            ),
        )
        for i in range(count)
    ]
