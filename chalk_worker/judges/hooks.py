"""What the judges tell whoever watches the worker: hooks the worker's metrics fill in.

The judges call ``HOOKS.judge_timer``, ``HOOKS.sandbox_run`` and
``HOOKS.rubric_verdicts`` and know nothing of Prometheus; until
``chalk_worker.metrics.install`` replaces them (a worker does, at start), they
do nothing: ``score_job`` and ``chalk score`` serve no metrics, and record none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from chalk_client.judge_specs import JudgeType
    from chalk_worker.sandbox.process import ProcessOutcome


class GradedVerdict(Protocol):
    """What is told of a rubric verdict (``chalk_worker.llm.verdicts.Verdict``)."""

    @property
    def cached(self) -> bool:
        """Whether it was remembered rather than asked."""

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens it took."""

    @property
    def completion_tokens(self) -> int:
        """Completion tokens it took."""


def _untimed(judge_type: JudgeType) -> AbstractContextManager[None]:
    return nullcontext()


def _ignored(*_: object) -> None:
    return None


@dataclass
class JudgeHooks:
    """The judges' hooks; each one a no-op until replaced."""

    judge_timer: Callable[[JudgeType], AbstractContextManager[None]] = _untimed
    """Around one judge of the given type (also when it raises)."""
    sandbox_run: Callable[[ProcessOutcome], None] = _ignored
    """After each sandboxed run: how it ended."""
    rubric_verdicts: Callable[[str, Iterable[GradedVerdict]], None] = _ignored
    """After a rubric judge: its model, and its verdicts (asked or remembered)."""


HOOKS = JudgeHooks()
"""The hooks the judges call (``chalk_worker.metrics.install`` sets them)."""
