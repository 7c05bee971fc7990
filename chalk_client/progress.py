"""Counting results as they arrive: the progress line and the closing summary."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

from chalk_client.jobs import JobResult, JobStatus


@dataclass
class Tally:
    """Running counts over results: by status, the score sum, the first failures."""

    total: int | None = None
    skipped: int = 0
    succeeded: int = 0
    failed: int = 0
    score_sum: float = 0.0
    failures: list[tuple[str, str]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    @property
    def done(self) -> int:
        """Results counted so far (not those skipped as already scored)."""
        return self.succeeded + self.failed

    @property
    def mean_score(self) -> float | None:
        """Mean score of the succeeded results, or ``None`` if there are none."""
        return self.score_sum / self.succeeded if self.succeeded else None

    def add(self, result: JobResult) -> None:
        """Count one finished result."""
        if result.status is JobStatus.SUCCEEDED:
            self.succeeded += 1
            self.score_sum += result.score or 0.0
        else:
            self.failed += 1
            if len(self.failures) < 20:
                self.failures.append((result.job_id, result.error or "no error recorded"))

    def line(self) -> str:
        """One status line: counts, mean score, rate and time left."""
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.done / elapsed
        mean = "-" if self.mean_score is None else f"{self.mean_score:.3f}"
        head = f"{self.done}" if self.total is None else f"{self.done}/{self.total}"
        text = f"{head} scored, {self.failed} failed, mean score {mean}, {rate:.1f} jobs/s"
        if self.total is not None and rate > 0 and self.done < self.total:
            text += f", about {(self.total - self.done) / rate:.0f} s left"
        return text

    def summary(self) -> str:
        """The closing report, several lines."""
        lines = [f"Scored {self.done} jobs: {self.succeeded} succeeded, {self.failed} failed."]
        if self.skipped:
            lines.append(f"Skipped {self.skipped} jobs already scored in the output file.")
        if self.mean_score is not None:
            lines.append(f"Mean score: {self.mean_score:.4f}")
        for job_id, error in self.failures:
            lines.append(f"  failed {job_id}: {error}")
        if self.failed > len(self.failures):
            lines.append(f"  ... and {self.failed - len(self.failures)} more failures")
        return "\n".join(lines)


class ProgressBar:
    """A one-line progress display, drawn only when ``stream`` is a terminal."""

    def __init__(self, tally: Tally, stream: TextIO = sys.stderr, every_s: float = 0.2) -> None:
        self.tally = tally
        self.stream = stream
        self.enabled = stream.isatty()
        self.every_s = every_s
        self._last = 0.0

    def update(self, force: bool = False) -> None:
        """Redraw, at most every ``every_s`` seconds unless forced."""
        now = time.monotonic()
        if not self.enabled or (not force and now - self._last < self.every_s):
            return
        self._last = now
        total = self.tally.total
        bar = ""
        if total:
            filled = int(30 * self.tally.done / total)
            bar = "[" + "#" * filled + "." * (30 - filled) + "] "
        self.stream.write("\r\x1b[2K" + bar + self.tally.line())
        self.stream.flush()

    def close(self) -> None:
        """Finish the line so the summary starts on a fresh one."""
        if self.enabled:
            self.update(force=True)
            self.stream.write("\n")
            self.stream.flush()
