"""Writing your own judges and rubric contexts, registered by name.

Task packages under ``tasks/`` register code here; a job names it with
``CustomJudge(name, params)`` or ``CustomContext(name, params)`` and the worker
builds it from that plain data, never from pickled code::

    @register_judge("final_message")
    class FinalMessageJudge(Judge):
        def __init__(self, expected: str) -> None:
            self.expected = expected

        def evaluate(self, transcript: Transcript) -> Scoring:
            ...

Custom judges run inside the worker process (they are the operator's code, not
the student's); raise ``StudentMisbehaviorError`` to score 0 for tampering.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from chalk_client.registry import Registry
from chalk_client.scoring import Scoring
from chalk_client.transcript import Transcript


class Judge(ABC):
    """Base class of custom judges: implement ``evaluate``.

    Before ``evaluate`` runs, the worker sets ``saved_submissions`` (the saved
    copies of the step's submission paths, in order; a path the student never
    wrote is there but does not exist) and ``submission_dir``.
    """

    saved_submissions: tuple[Path, ...] = ()
    submission_dir: Path | None = None

    @abstractmethod
    def evaluate(self, transcript: Transcript) -> Scoring:
        """Score the step from the transcript (and the saved submission files)."""


class RubricContext(ABC):
    """Base class of custom rubric contexts: implement ``render``."""

    saved_submissions: tuple[Path, ...] = ()
    submission_dir: Path | None = None

    @abstractmethod
    def render(self, transcript: Transcript) -> str:
        """The text the LLM should see."""


JudgeFactory = Callable[..., Judge]
ContextFactory = Callable[..., RubricContext]
_F = TypeVar("_F", bound=Callable[..., Any])

JUDGES: Registry[JudgeFactory] = Registry(
    "custom judge",
    "register it with @register_judge in a package under tasks/ or a module listed in "
    "CHALK_TASK_MODULES",
)
"""Custom judges by name: ``Judge`` subclasses, or factories returning one."""
CONTEXTS: Registry[ContextFactory] = Registry(
    "rubric context",
    "register it with @register_context in a package under tasks/ or a module listed in "
    "CHALK_TASK_MODULES",
)
"""Custom rubric contexts by name: ``RubricContext`` subclasses."""


def register_judge(name: str) -> Callable[[_F], _F]:
    """Register a custom judge under ``name``: a ``Judge`` subclass or a factory returning one.

    The job's ``params`` are passed as keyword arguments.
    """
    return JUDGES.register(name)


def register_context(name: str) -> Callable[[_F], _F]:
    """Register a custom rubric context under ``name`` (a ``RubricContext`` subclass)."""
    return CONTEXTS.register(name)


def registered_judge(name: str) -> JudgeFactory:
    """The judge factory registered under ``name``; raises ``UnknownJudgeError``."""
    return JUDGES[name]


def registered_context(name: str) -> ContextFactory:
    """The context factory registered under ``name``; raises ``UnknownJudgeError``."""
    return CONTEXTS[name]
