"""Where a batch stands: counts by status, the mean score, the failures, the LLM tokens."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from chalk_client.cluster.watch import JobState
from chalk_client.jobs import JobResult, JobStatus
from chalk_client.scoring import ZeroCause
from chalk_client.settings import ChalkSettings
from chalk_client.store import JobStore
from chalk_client.usage import TokenUsage
from chalk_client.wording import describe_causes, grader_error_message

FAILURES_KEPT = 20
"""Failures listed in a summary (all are counted)."""


@dataclass(frozen=True)
class BatchSummary:
    """A batch's (or any set of jobs') state at one moment."""

    total: int
    """Distinct jobs."""
    queued: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    """Jobs whose batch was cancelled before they finished."""
    unknown: int = 0
    """Jobs with neither a record nor a result: never submitted, or expired."""
    mean_score: float | None = None
    """Mean score of the succeeded jobs."""
    failures: list[tuple[str, str]] = field(default_factory=list)
    """``(job id, error)`` of the first failed jobs."""
    batch_id: str | None = None
    tokens: TokenUsage = field(default_factory=TokenUsage)
    """LLM tokens the finished jobs' verdicts used (``chalk_client.usage``)."""
    cost: float | None = None
    """Their estimated cost in USD, when a price is configured."""
    zeros: Counter[ZeroCause | None] = field(default_factory=Counter)
    """Succeeded jobs scored 0 (or given a failure verdict), by ``ZeroCause``."""
    first_grader_error: tuple[str, str] | None = None
    """``(job id, message)`` of the first grader error found."""

    @property
    def grader_errors(self) -> int:
        """Succeeded jobs whose verdict is a grader error: the grader's zero, not the student's."""
        return self.zeros[ZeroCause.GRADER_ERROR]

    @property
    def done(self) -> int:
        """Jobs with a result."""
        return self.succeeded + self.failed + self.cancelled

    @property
    def state(self) -> str:
        """``finished`` (or ``cancelled``) when every job has a result, else ``running`` or
        ``queued``."""
        if self.done == self.total:
            return "cancelled" if self.cancelled else "finished"
        return "running" if self.running or self.done else "queued"

    def as_json(self) -> dict[str, Any]:
        """The summary as plain JSON values (the ``summary`` of a batch's callback).

        ``counts`` has every status; ``zeros`` counts the zeros by cause (``none``:
        a zero without a recorded cause); ``failures`` lists the first failed jobs
        (``failed`` in ``counts`` counts them all); ``cost_usd`` is ``null`` without
        prices.
        """
        grader_error = self.first_grader_error
        return {
            "batch_id": self.batch_id,
            "state": self.state,
            "total": self.total,
            "done": self.done,
            "counts": {
                "queued": self.queued,
                "running": self.running,
                "succeeded": self.succeeded,
                "failed": self.failed,
                "cancelled": self.cancelled,
                "unknown": self.unknown,
            },
            "mean_score": self.mean_score,
            "failures": [{"job_id": job_id, "error": error} for job_id, error in self.failures],
            "zeros": {str(cause or "none"): count for cause, count in self.zeros.most_common()},
            "grader_errors": self.grader_errors,
            "first_grader_error": None
            if grader_error is None
            else {"job_id": grader_error[0], "message": grader_error[1]},
            "tokens": {"prompt": self.tokens.prompt, "completion": self.tokens.completion},
            "cost_usd": self.cost,
        }

    def render(self) -> str:
        """The summary as ``chalk status`` prints it."""
        name = f"batch {self.batch_id}" if self.batch_id else "jobs"
        mean = "-" if self.mean_score is None else f"{self.mean_score:.4f}"
        lines = [
            f"{name}: {self.state}, {self.done}/{self.total} done",
            f"  queued {self.queued}, running {self.running}, succeeded {self.succeeded}, "
            f"failed {self.failed}"
            + (f", cancelled {self.cancelled}" if self.cancelled else "")
            + (f", unknown {self.unknown}" if self.unknown else ""),
            f"  mean score: {mean}",
        ]
        if self.zeros:
            lines.append(f"  zeros by cause: {describe_causes(self.zeros)}")
        if self.first_grader_error is not None:
            job_id, message = self.first_grader_error
            lines.append(
                f"  WARNING: {self.grader_errors} grader error(s): scored 0 because the scoring "
                f"script failed, not the student; first, {job_id}: {message}"
            )
        if self.tokens.total:
            lines.append(f"  LLM: {self.tokens.describe(self.cost)}")
        lines.extend(f"  failed {job_id}: {error}" for job_id, error in self.failures)
        if self.failed > len(self.failures):
            lines.append(f"  ... and {self.failed - len(self.failures)} more failures")
        return "\n".join(lines)


def summarize(
    job_ids: Sequence[str],
    results: Sequence[JobResult | None],
    states: Sequence[JobState],
    batch_id: str | None = None,
    settings: ChalkSettings | None = None,
) -> BatchSummary:
    """Count ``results`` (one per id, ``None`` when unfinished) and, for the unfinished, ``states``.

    ``states`` holds one entry per ``None`` in ``results``, in the same order.
    The cost is estimated at the prices of ``settings`` (if any).
    """
    counts = {status: 0 for status in JobStatus}
    unknown = 0
    scores: list[float] = []
    failures: list[tuple[str, str]] = []
    pending = iter(states)
    tokens = TokenUsage()
    zeros: Counter[ZeroCause | None] = Counter()
    first_grader_error: tuple[str, str] | None = None
    for job_id, result in zip(job_ids, results, strict=True):
        if result is None:
            state = next(pending)
            if not state.recorded:
                unknown += 1
            else:
                # Finished between the two reads: it was running a moment ago.
                running = state.running or state.finished
                counts[JobStatus.RUNNING if running else JobStatus.QUEUED] += 1
            continue
        counts[result.status] += 1
        tokens = tokens + TokenUsage.of_result(result)
        if result.status is JobStatus.SUCCEEDED:
            scores.append(result.score or 0.0)
            if result.cause is not None or result.score == 0:
                zeros[result.cause] += 1
            if result.grader_error and first_grader_error is None:
                first_grader_error = (job_id, grader_error_message(result))
        elif result.status is JobStatus.FAILED and len(failures) < FAILURES_KEPT:
            failures.append((job_id, result.error or "no error recorded"))
    return BatchSummary(
        total=len(job_ids),
        queued=counts[JobStatus.QUEUED],
        running=counts[JobStatus.RUNNING],
        succeeded=counts[JobStatus.SUCCEEDED],
        failed=counts[JobStatus.FAILED],
        cancelled=counts[JobStatus.CANCELLED],
        unknown=unknown,
        mean_score=sum(scores) / len(scores) if scores else None,
        failures=failures,
        batch_id=batch_id,
        tokens=tokens,
        cost=None if settings is None else tokens.cost(settings),
        zeros=zeros,
        first_grader_error=first_grader_error,
    )


def summarize_jobs(
    store: JobStore, job_ids: Sequence[str], batch_id: str | None = None
) -> BatchSummary:
    """The summary of ``job_ids`` (repeats counted once) as the store has them now."""
    ids = list(dict.fromkeys(job_ids))
    results = store.results(ids)
    unfinished = [job_id for job_id, result in zip(ids, results, strict=True) if result is None]
    states = store.states(unfinished)
    return summarize(ids, results, states, batch_id=batch_id, settings=store.settings)
