"""Counting results as they arrive: the progress line, the warnings and the closing summary."""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TextIO

from chalk_client.jobs import JobResult, JobStatus
from chalk_client.scoring import ZeroCause
from chalk_client.wording import describe_causes, grader_error_message, plural

FAILURES_SHOWN = 20
"""Failures listed by name in a summary (all are counted)."""


@dataclass
class Tally:
    """Running counts over results: by status, the score sum, zeros by cause, the first failures."""

    total: int | None = None
    skipped: int = 0
    """Jobs not scored because ``--out`` already holds their result."""
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    score_sum: float = 0.0
    zeros: Counter[ZeroCause | None] = field(default_factory=Counter)
    """Succeeded jobs with a cause (zeros, failure verdicts), by cause; ``None``: a zero
    without one (written by an older worker)."""
    failures: list[tuple[str, str]] = field(default_factory=list)
    first_grader_error: tuple[str, str] | None = None
    """``(job id, message)`` of the first grader error."""
    started: float = field(default_factory=time.monotonic)

    @property
    def done(self) -> int:
        """Results counted so far (not those skipped as already scored)."""
        return self.succeeded + self.failed + self.cancelled

    @property
    def grader_errors(self) -> int:
        """Verdicts that are the grader's failure (``ZeroCause.GRADER_ERROR``)."""
        return self.zeros[ZeroCause.GRADER_ERROR]

    @property
    def mean_score(self) -> float | None:
        """Mean score of the succeeded results, or ``None`` if there are none."""
        return self.score_sum / self.succeeded if self.succeeded else None

    def add(self, result: JobResult) -> None:
        """Count one finished result."""
        if result.status is JobStatus.SUCCEEDED:
            self.succeeded += 1
            self.score_sum += result.score or 0.0
            if result.cause is not None or result.score == 0:
                self.zeros[result.cause] += 1
            if result.grader_error and self.first_grader_error is None:
                self.first_grader_error = (result.job_id, grader_error_message(result))
        elif result.status is JobStatus.CANCELLED:
            self.cancelled += 1
        else:
            self.failed += 1
            if len(self.failures) < FAILURES_SHOWN:
                self.failures.append((result.job_id, result.error or "no error recorded"))

    def line(self) -> str:
        """One status line: counts, grader errors, mean score, rate and time left."""
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.done / elapsed
        mean = "-" if self.mean_score is None else f"{self.mean_score:.3f}"
        head = f"{self.done}" if self.total is None else f"{self.done}/{self.total}"
        text = f"{head} scored, {self.failed} failed"
        if self.cancelled:
            text += f", {self.cancelled} cancelled"
        if self.grader_errors:
            text += f", {plural(self.grader_errors, 'grader error')}"
        text += f", mean score {mean}, {rate:.1f} jobs/s"
        if self.total is not None and rate > 0 and self.done < self.total:
            text += f", about {(self.total - self.done) / rate:.0f} s left"
        return text

    def grader_warning(self) -> str | None:
        """The warning that grader errors were counted as zeros, with the first message."""
        if self.first_grader_error is None:
            return None
        job_id, message = self.first_grader_error
        return (
            f"WARNING: {plural(self.grader_errors, 'job')} scored 0 because the grader failed "
            f"(a scoring script that could not start, crashed or wrote no valid output), not "
            f"because of the student. First, {job_id}: {message}"
        )

    def summary(self) -> str:
        """The closing report, several lines."""
        lines = [
            f"Scored {plural(self.done, 'job')}: {self.succeeded} succeeded, {self.failed} failed"
            + (f", {self.cancelled} cancelled." if self.cancelled else ".")
        ]
        if self.skipped:
            lines.append(
                f"Skipped {plural(self.skipped, 'job')} already scored in the output file "
                "(--rescore scores them again)."
            )
        if self.mean_score is not None:
            lines.append(f"Mean score: {self.mean_score:.4f}")
        if self.zeros:
            lines.append("Zeros by cause: " + describe_causes(self.zeros))
        warning = self.grader_warning()
        if warning:
            lines.append(warning)
        for job_id, error in self.failures:
            lines.append(f"  failed {job_id}: {error}")
        if self.failed > len(self.failures):
            lines.append(f"  ... and {self.failed - len(self.failures)} more failures")
        return "\n".join(lines)


class ProgressBar:
    """A one-line progress display, drawn only when ``stream`` is a terminal.

    Lines said through ``say`` (from any thread) are printed above it.
    """

    def __init__(self, tally: Tally, stream: TextIO = sys.stderr, every_s: float = 0.2) -> None:
        self.tally = tally
        self.stream = stream
        self.enabled = stream.isatty()
        self.every_s = every_s
        self._last = 0.0
        self._lock = threading.RLock()

    def update(self, force: bool = False) -> None:
        """Redraw, at most every ``every_s`` seconds unless forced."""
        with self._lock:
            self._draw(force)

    def _draw(self, force: bool) -> None:
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

    def say(self, text: str) -> None:
        """Print a line of its own (a warning), above the progress line when one is drawn."""
        with self._lock:
            if self.enabled:
                self.stream.write("\r\x1b[2K")
            self.stream.write(text + "\n")
            self.stream.flush()
            if self.enabled:
                self._draw(force=True)

    def close(self) -> None:
        """Finish the line so the summary starts on a fresh one."""
        with self._lock:
            if self.enabled:
                self._draw(force=True)
                self.stream.write("\n")
                self.stream.flush()


@dataclass
class ResultSink:
    """Where ``chalk score`` puts each result: a line in ``out``, the tally, the progress line.

    The first grader error is announced at once, not only in the summary.
    """

    out: TextIO
    tally: Tally
    bar: ProgressBar

    def write(self, result: JobResult) -> None:
        """Write one result as a JSON line and count it."""
        self.out.write(result.model_dump_json() + "\n")
        self.out.flush()
        self.tally.add(result)
        if result.grader_error and self.tally.grader_errors == 1:
            self.bar.say(f"chalk score: {self.tally.grader_warning()}")
        self.bar.update()
