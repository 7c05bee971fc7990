"""The evaluator registry: one async evaluator per judge ``type``."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from chalk_client.judge_specs import JudgeSpec
from chalk_client.scoring import Scoring
from chalk_client.settings import ChalkSettings, ResolvedLimits
from chalk_client.transcript import Transcript
from chalk_worker import metrics


@dataclass(frozen=True)
class JudgeContext:
    """What an evaluator may use to judge one step."""

    transcript: Transcript
    saved_submissions: tuple[Path, ...]
    """The step's saved submission copies, in order (some may not exist)."""
    submission_dir: Path
    """The folder holding the unpacked submission."""
    job_dir: Path
    """The job's private folder; evaluators make their temporary folders inside it."""
    limits: ResolvedLimits
    settings: ChalkSettings
    llm_budget: LLMBudget | None = None
    """The job's time for LLM grading, shared by its rubric judges (``None``: a fresh one)."""


@dataclass
class LLMBudget:
    """The seconds a job may spend grading with the LLM, all its rubric judges together."""

    seconds: float
    spent: float = 0.0

    @property
    def left(self) -> float:
        """Seconds still available."""
        return self.seconds - self.spent


Evaluator = Callable[[Any, JudgeContext], Awaitable[Scoring]]
_E = TypeVar("_E", bound=Evaluator)
_evaluators: dict[str, Evaluator] = {}
_import_lock = threading.Lock()

MODULES = {
    "all": "combine",
    "always_pass": "always_pass",
    "any": "combine",
    "custom": "custom",
    "executable": "executable",
    "regex": "regex",
    "rubric": "rubric",
}
"""The module of ``chalk_worker.judges`` that registers each judge type's evaluator."""


def evaluator(kind: str) -> Callable[[_E], _E]:
    """Register the evaluator of judges whose ``type`` is ``kind``."""

    def register(function: _E) -> _E:
        _evaluators[kind] = function
        return function

    return register


def evaluator_of(kind: str) -> Evaluator:
    """The evaluator of judges of type ``kind``, its module imported on first use."""
    found = _evaluators.get(kind)
    if found is None:
        with _import_lock:
            importlib.import_module(f"chalk_worker.judges.{MODULES[kind]}")
        found = _evaluators[kind]
    return found


async def evaluate(judge: JudgeSpec, context: JudgeContext) -> Scoring:
    """Judge one step with the evaluator registered for the judge's type."""
    with metrics.judge_timer(judge.type):
        return await evaluator_of(judge.type)(judge, context)
