"""Chalk Queue's client: models, judges and the ``chalk`` command."""

from chalk_client.async_client import AsyncBatch, AsyncChalkClient, AsyncJobHandle
from chalk_client.client import Batch, ChalkClient, JobHandle
from chalk_client.errors import (
    ChalkError,
    InvalidJobError,
    JudgeError,
    ResultTimeout,
    StudentMisbehaviorError,
)
from chalk_client.jobs import JobResult, JobStatus, ScoringJob, Step
from chalk_client.scoring import Scoring, ZeroCause
from chalk_client.settings import ChalkSettings, Limits
from chalk_client.submission import Submission
from chalk_client.summary import BatchSummary
from chalk_client.transcript import Message, Transcript

__all__ = [
    "AsyncBatch",
    "AsyncChalkClient",
    "AsyncJobHandle",
    "Batch",
    "BatchSummary",
    "ChalkClient",
    "ChalkError",
    "ChalkSettings",
    "InvalidJobError",
    "JobHandle",
    "JobResult",
    "JobStatus",
    "JudgeError",
    "Limits",
    "Message",
    "ResultTimeout",
    "Scoring",
    "ScoringJob",
    "Step",
    "StudentMisbehaviorError",
    "Submission",
    "Transcript",
    "ZeroCause",
]
