"""The evaluator registry: one async evaluator per judge ``type``."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from chalk_client.judge_specs import JudgeSpec, JudgeType
from chalk_client.registry import Registry
from chalk_client.scoring import Scoring
from chalk_client.settings import ChalkSettings, ResolvedLimits
from chalk_client.transcript import Transcript
from chalk_worker.judges.hooks import HOOKS


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
    waits: JudgeWaits | None = None
    """Where the job's evaluators add the time they waited (``None``: not counted)."""


@dataclass
class JudgeWaits:
    """Time a job's judges spent waiting rather than judging: ``timings["sandbox_wait"]``."""

    sandbox_s: float = 0.0
    """Seconds scoring scripts waited for a free sandbox slot (one per core)."""
    sandbox_runs: int = 0
    """Scoring scripts run."""


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
EVALUATORS: Registry[Evaluator] = Registry(
    "judge evaluator", "add a module to chalk_worker/judges/ with an @evaluator function"
)
"""One evaluator per judge ``type``."""
_import_lock = threading.Lock()

MODULES: dict[JudgeType, str] = {
    "all": "combine",
    "always_pass": "always_pass",
    "any": "combine",
    "custom": "custom",
    "executable": "executable",
    "regex": "regex",
    "rubric": "rubric",
    "tests": "tests",
}
"""The module of ``chalk_worker.judges`` that registers each judge type's evaluator."""


def evaluator(kind: JudgeType) -> Callable[[_E], _E]:
    """Register the evaluator of judges whose ``type`` is ``kind``."""
    return EVALUATORS.register(kind)


def evaluator_of(kind: JudgeType) -> Evaluator:
    """The evaluator of judges of type ``kind``, its module imported on first use."""
    if kind not in EVALUATORS and kind in MODULES:
        with _import_lock:
            importlib.import_module(f"chalk_worker.judges.{MODULES[kind]}")
    return EVALUATORS[kind]


async def evaluate(judge: JudgeSpec, context: JudgeContext) -> Scoring:
    """Judge one step with the evaluator registered for the judge's type."""
    with HOOKS.judge_timer(judge.type):
        return await evaluator_of(judge.type)(judge, context)
