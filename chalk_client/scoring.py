"""The verdict of one judge."""

from __future__ import annotations

import json
import math
from enum import StrEnum
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


class ZeroCause(StrEnum):
    """Why a verdict is a zero (or a failure verdict): the student's doing, or the grader's.

    The reference scores all of these 0; the cause tells them apart without
    reading the metadata, which stays exactly as the reference writes it.
    """

    GRADER_ERROR = "grader_error"
    """The grader, not the student: a scoring script that could not start, was not found,
    crashed (exited non-zero) or wrote no or malformed output; a working folder that is
    missing or closed; a command that uses ``{submission}`` when the step has no file."""
    TIMEOUT = "timeout"
    """A scoring script (or a regex judge's searches) ran past its time limit."""
    OUT_OF_MEMORY = "out_of_memory"
    """A scoring script's process tree went over its memory limit and was killed."""
    MISBEHAVIOR = "misbehavior"
    """The student tampered (a link, a device, a bomb, ...): ``metadata["misbehavior"]``."""
    UNMATCHED_PATTERNS = "unmatched_patterns"
    """A regex judge found some pattern missing: ``metadata["unmatched_patterns"]``."""
    UNMET_CRITERIA = "unmet_criteria"
    """A rubric judge whose criteria met add up to 0."""
    SCRIPT_ZERO = "script_zero"
    """A scoring script that ran well and wrote a score of 0."""
    CUSTOM_ZERO = "custom_zero"
    """A custom judge that returned 0 without a cause of its own."""
    COMPILE_ERROR = "compile_error"
    """A tests judge's program did not compile: every test ``CE``."""
    FAILED_TESTS = "failed_tests"
    """A tests judge's program passed none of its tests (``all_or_nothing``: not all)."""


class Verdict(StrEnum):
    """What became of one test of a ``tests`` judge."""

    ACCEPTED = "AC"
    """The output is the expected one."""
    WRONG_ANSWER = "WA"
    """It is not."""
    PRESENTATION_ERROR = "PE"
    """The right answer, laid out otherwise than required (``exact``, or a checker's 2)."""
    TIME_LIMIT = "TLE"
    """More CPU time than the limit, or still running at the wall-clock cap twice."""
    MEMORY_LIMIT = "MLE"
    """More memory than the limit (killed by it, or out of memory in Java or Python)."""
    RUNTIME_ERROR = "RE"
    """Exited with a status other than 0, or killed by a signal."""
    OUTPUT_LIMIT = "OLE"
    """Wrote more than the output limit; stopped there."""
    COMPILE_ERROR = "CE"
    """The program did not compile, so no test ran."""
    SKIPPED = "SKIPPED"
    """Not run: an earlier test failed and the judge stops at the first failure."""


class TestResult(BaseModel):
    """One test of a ``tests`` judge: its verdict and what the program used."""

    __test__ = False  # not a pytest test class, whatever its name

    verdict: Verdict
    cpu_s: float | None = None
    """CPU seconds of the program and everything it started (``None``: not run or not
    measured)."""
    wall_s: float | None = None
    """Wall-clock seconds of the run."""
    memory_mb: float | None = None
    """Peak memory of the program and its processes, in MiB."""
    exit_code: int | None = None
    """The program's exit status; negative: killed by that signal."""
    retried: bool = False
    """It reached the wall-clock cap within its CPU limit (a busy machine) and ran again."""
    detail: str | None = None
    """A word on the verdict: the signal, the checker's message, where the outputs differ."""
    stdout: str | None = None
    """What the program wrote on stdout, when the judge keeps output (``keep_output``)."""
    stderr: str | None = None
    """What it wrote on stderr, likewise."""


class CompileResult(BaseModel):
    """How a ``tests`` judge's program compiled (compiled languages only)."""

    ok: bool
    seconds: float
    """Wall-clock seconds of the compile (0 when it came from the cache)."""
    stderr: str = ""
    """The compiler's messages, capped."""
    cached: bool = False
    """The same source, compiler and flags were compiled before: that build was used."""


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

    cause: ZeroCause | None = None
    """Why the score is 0 (or why the step failed), set by the judge that decided it;
    ``None`` for other scores. Results written before causes existed have none."""

    tests: list[TestResult] | None = None
    """A ``tests`` judge's verdict on each test, in order (``None`` for other judges)."""

    compile: CompileResult | None = None
    """How a ``tests`` judge's program compiled (``None``: not a compiled language)."""

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
    def fail(
        cls, reason_key: str, reason: str, *, cause: ZeroCause | None = None, **extra: str
    ) -> Scoring:
        """A zero that stops the task, with the reason under ``reason_key`` and its ``cause``."""
        return cls(
            score=0.0, metadata={reason_key: reason, **extra}, continue_task=False, cause=cause
        )

    @property
    def grader_error(self) -> bool:
        """Whether this verdict is the grader's failure rather than the student's zero."""
        return self.cause is ZeroCause.GRADER_ERROR
