"""Chalk Queue's client: models, judges and the ``chalk`` command.

The client classes (``ChalkClient``, ``AsyncChalkClient``, their batches and
handles, ``BatchSummary``) are imported on first use: they bring Redis and
kombu along, which ``chalk score`` without a cluster never needs.
"""

from importlib import import_module
from typing import TYPE_CHECKING

from chalk_client.errors import (
    ChalkError,
    InvalidJobError,
    JudgeError,
    ResultTimeout,
    StudentMisbehaviorError,
)
from chalk_client.jobs import JobResult, JobStatus, ScoringJob, Step
from chalk_client.scoring import CompileResult, Scoring, TestResult, Verdict, ZeroCause
from chalk_client.settings import ChalkSettings, Limits
from chalk_client.submission import Submission
from chalk_client.transcript import Message, Transcript

if TYPE_CHECKING:
    from chalk_client.async_client import AsyncChalkClient
    from chalk_client.async_handles import AsyncBatch, AsyncJobHandle
    from chalk_client.client import ChalkClient
    from chalk_client.handles import Batch, JobHandle
    from chalk_client.summary import BatchSummary

_ON_FIRST_USE = {
    "AsyncBatch": "chalk_client.async_handles",
    "AsyncChalkClient": "chalk_client.async_client",
    "AsyncJobHandle": "chalk_client.async_handles",
    "Batch": "chalk_client.handles",
    "BatchSummary": "chalk_client.summary",
    "ChalkClient": "chalk_client.client",
    "JobHandle": "chalk_client.handles",
}


def __getattr__(name: str) -> object:
    """The client classes, imported when first asked for (see the module's docstring)."""
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module 'chalk_client' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "AsyncBatch",
    "AsyncChalkClient",
    "AsyncJobHandle",
    "Batch",
    "BatchSummary",
    "ChalkClient",
    "ChalkError",
    "ChalkSettings",
    "CompileResult",
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
    "TestResult",
    "Transcript",
    "Verdict",
    "ZeroCause",
]
