"""How long a batch has left, for ``chalk status BATCH``.

The rate is the batch's own since it was submitted (jobs with a result over the
time elapsed), so the estimate needs no history: it is steady for a batch that
the cluster works through at an even pace, and pessimistic for one that waited
for workers at first.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from chalk_client.cluster import keys
from chalk_client.store import JobStore
from chalk_client.store_errors import reaching
from chalk_client.summary import BatchSummary


def duration(seconds: float) -> str:
    """``seconds`` for people: ``42 s``, ``3 min 5 s``, ``2 h 10 min``."""
    seconds = max(round(seconds), 0)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


@dataclass(frozen=True)
class BatchProgress:
    """A batch's pace: when it was submitted, how fast it finishes, when it should be done."""

    elapsed_s: float
    done: int
    total: int

    @property
    def rate(self) -> float:
        """Jobs finished per second since submission."""
        return self.done / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def left_s(self) -> float | None:
        """Seconds until every job has a result at this rate; ``None`` before any has one."""
        if self.done >= self.total:
            return 0.0
        if self.rate <= 0:
            return None
        return (self.total - self.done) / self.rate

    def render(self, now: float | None = None) -> str:
        """The ``chalk status`` line."""
        head = f"  submitted {duration(self.elapsed_s)} ago"
        if self.done >= self.total:
            return head + ", finished"
        left = self.left_s
        if left is None:
            return head + ", no job finished yet: no ETA"
        finish = datetime.fromtimestamp((now or time.time()) + left).strftime("%H:%M:%S")
        return f"{head}, {self.rate:.1f} jobs/s, ETA {duration(left)} (about {finish})"


def batch_progress(store: JobStore, summary: BatchSummary) -> BatchProgress | None:
    """The batch's pace, or ``None`` when its submission time is no longer kept."""
    if summary.batch_id is None:
        return None
    with reaching(store.url):
        created: Any = store.redis.zscore(keys.BATCHES, summary.batch_id)
    if created is None:
        return None
    elapsed = max(time.time() - float(created), 1e-3)
    return BatchProgress(elapsed_s=elapsed, done=summary.done, total=summary.total)
