"""The verdict of one judge."""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import BaseModel, Field, field_validator

TOO_DEEP = "(a value nested too deeply to show)"


def _as_text(value: Any) -> str:
    """A metadata value as text: JSON for dicts and lists, ``str`` for the rest.

    Whatever a judge returns becomes some text: keys of mixed types are left in their
    order, values JSON cannot hold are shown with ``str``, a structure that contains
    itself with ``repr``, and one nested too deeply for either as ``TOO_DEEP``.
    """
    if isinstance(value, str):
        return value
    try:
        if isinstance(value, (dict, list)):
            try:
                return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
            except TypeError:  # keys that cannot be sorted together
                return json.dumps(value, ensure_ascii=False, default=str)
        return str(value)
    except ValueError:  # a structure that contains itself
        return repr(value)
    except RecursionError:
        return TOO_DEEP


class Scoring(BaseModel):
    """What a judge decided about one step.

    ``continue_task`` is the pass/fail signal: ``&`` and ``|`` combine judges by
    it, and a job with several steps stops after a step whose ``continue_task``
    is false.
    """

    score: float
    """The score; any finite number (rubrics sum weights, scripts choose freely)."""

    metadata: dict[str, str] = Field(default_factory=dict)
    """Why: reasons, captured output, errors. Values are converted to strings."""

    continue_task: bool = True
    """Whether the task goes on to its next step."""

    @field_validator("score")
    @classmethod
    def _finite(cls, score: float) -> float:
        if not math.isfinite(score):
            raise ValueError(f"score must be a finite number, got {score}")
        return score

    @field_validator("metadata", mode="before")
    @classmethod
    def _stringify(cls, metadata: Any) -> Any:
        if isinstance(metadata, dict):
            return {str(key): _as_text(value) for key, value in metadata.items()}
        return metadata

    @classmethod
    def fail(cls, reason_key: str, reason: str, **extra: str) -> Scoring:
        """A zero that stops the task, with the reason under ``reason_key``."""
        return cls(score=0.0, metadata={reason_key: reason, **extra}, continue_task=False)
