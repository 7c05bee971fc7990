"""Jobs, steps and results: what users submit and what they get back."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from chalk_client.judge_specs import JudgeSpec
from chalk_client.positional import UNSET, with_positional
from chalk_client.scoring import Scoring, ZeroCause
from chalk_client.settings import Limits
from chalk_client.submission import Submission
from chalk_client.transcript import JsonData, Transcript, check_json_numbers

Priority = Literal["high", "normal", "low"]
"""How urgent a job is: a worker takes every ``high`` job waiting before a ``normal`` one,
and every ``normal`` one before a ``low`` one."""
PRIORITIES: tuple[Priority, ...] = get_args(Priority)
DEFAULT_PRIORITY: Priority = "normal"


def check_priority(value: object) -> Priority:
    """``value`` if it is a priority; else ``ValueError`` saying which ones there are."""
    for priority in PRIORITIES:
        if value == priority:
            return priority
    raise ValueError(f"priority {value!r} is not one of {', '.join(PRIORITIES)}")


def _check_relative(paths: list[str]) -> list[str]:
    for path in paths:
        pure = PurePosixPath(path)
        if not path or pure.is_absolute() or ".." in pure.parts:
            raise ValueError(
                f"submission path {path!r} must be relative to the submission, without '..'"
            )
    return paths


class Step(BaseModel):
    """One scored step: a judge and the submission files it reads.

    ``submission_paths`` empty means the job's ``submission_paths``.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    judge: JudgeSpec
    submission_paths: list[str] = Field(default_factory=list)
    name: str | None = None

    def __init__(
        self,
        /,
        judge: JudgeSpec | Mapping[str, object] = UNSET,
        submission_paths: Sequence[str] = UNSET,
        **data: object,
    ) -> None:
        super().__init__(**with_positional(data, judge=judge, submission_paths=submission_paths))

    _relative = field_validator("submission_paths")(_check_relative)


class ScoringJob(BaseModel):
    """One rollout to score.

    Give either ``judge`` (one step) or ``steps`` (scored in order, stopping
    after a step that does not continue). ``id`` is the idempotency key: the
    same id is scored once. ``submission_paths`` name files inside
    ``submission``; judges get the saved copies (a path the student never wrote
    is passed anyway and does not exist). With no paths, every file of the
    submission is passed, in path order.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    id: str | None = Field(default=None, min_length=1, max_length=512)
    transcript: Transcript = Field(default_factory=Transcript)
    judge: JudgeSpec | None = None
    steps: list[Step] | None = None
    submission: Submission | None = None
    submission_paths: list[str] = Field(default_factory=list)
    metadata: dict[str, JsonData] = Field(default_factory=dict)
    """Yours: copied into the result untouched (so JSON values only: no NaN or Infinity)."""
    limits: Limits | None = None
    """Limits for this job, capped by the worker's maxima."""
    priority: Priority | None = None
    """This job's priority, over its batch's (``None``: the batch's, ``normal`` by default).
    Used when the job is queued: it is not kept in the job's record."""

    _relative = field_validator("submission_paths")(_check_relative)

    @field_validator("limits", mode="before")
    @classmethod
    def _finite_limits(cls, limits: object) -> object:
        # Limits travel to workers as JSON, which has no NaN or Infinity; checked first, so
        # that NaN is not reported as "not greater than 0".
        check_json_numbers(limits)
        return limits

    @model_validator(mode="after")
    def _judge_or_steps(self) -> ScoringJob:
        if self.judge is None and not self.steps:
            raise ValueError('a job needs a "judge" or a non-empty list of "steps"')
        if self.judge is not None and self.steps is not None:
            raise ValueError('give a job either "judge" or "steps", not both')
        return self

    def scored_steps(self) -> list[Step]:
        """The steps to score, in order (a plain ``judge`` is one step)."""
        if self.steps is not None:
            return list(self.steps)
        assert self.judge is not None
        return [Step(judge=self.judge)]

    def with_id(self) -> ScoringJob:
        """This job, given a fresh random id if it has none."""
        if self.id is not None:
            return self
        return self.model_copy(update={"id": uuid.uuid4().hex})


class JobStatus(StrEnum):
    """Where a job is: waiting, being scored, scored, could not be scored, or cancelled."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    """Its batch was cancelled before it finished: it has no verdict."""


class JobResult(BaseModel):
    """The outcome of one job.

    ``succeeded`` means a verdict exists, zeros and misbehaviour included.
    ``failed`` means the system could not score (``error`` says why).
    """

    job_id: str
    status: JobStatus
    scoring: Scoring | None = None
    """The job's verdict: that of the last step scored."""
    steps: list[Scoring] = Field(default_factory=list)
    """Each scored step's verdict, in order."""
    error: str | None = None
    """Why the system could not score, for ``failed``."""
    attempts: int = 0
    """How many times a worker started on this job."""
    timings: dict[str, float] = Field(default_factory=dict)
    """Seconds spent: ``collect`` (unpacking), ``judge`` (of which ``sandbox_wait``, the wait
    for a free sandbox slot, present when a scoring script ran) and ``total``."""
    worker: str | None = None
    """Which worker scored it."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """The job's own metadata, copied back."""

    @property
    def score(self) -> float | None:
        """The job's score, or ``None`` when it has no verdict."""
        return None if self.scoring is None else self.scoring.score

    @property
    def cause(self) -> ZeroCause | None:
        """Why the job's verdict is a zero (``ZeroCause``); ``None`` for other scores or none."""
        return None if self.scoring is None else self.scoring.cause

    @property
    def grader_error(self) -> bool:
        """Whether the job's verdict is a grader error (the scoring script's fault, not the
        student's): it scores 0 as the reference says, but says nothing of the student."""
        return self.scoring is not None and self.scoring.grader_error

    @property
    def done(self) -> bool:
        """Whether the job has finished (succeeded, failed or cancelled)."""
        return self.status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)
