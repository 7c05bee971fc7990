"""What a report says about a set of results: counts, scores, causes, steps, criteria, groups.

``analyze`` reads each result once and returns a ``Report`` of plain values;
the page (``page.py``) and ``chalk score``'s totals only format them.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from chalk_client.jobs import JobResult, JobStatus
from chalk_client.report.stats import Bin, MeanCI, histogram, mean_ci, percentile
from chalk_client.scoring import ZeroCause
from chalk_client.settings import ChalkSettings
from chalk_client.usage import TokenUsage

NO_CAUSE = "no_cause_recorded"
"""The cause shown for a zero written before results carried causes."""
NO_VALUE = "(none)"
"""The group of results whose metadata lacks the ``--by`` key."""
TIMINGS = ("total", "judge", "sandbox_wait", "collect")
"""The timings a report gives percentiles of, when results have them."""
QUANTILES = (50, 90, 99)
_CRITERION = re.compile(r"criterion_(\d+)$")

CAUSE_TEXT: dict[str, str] = {
    ZeroCause.GRADER_ERROR: "grader error: the scoring script failed, not the student",
    ZeroCause.TIMEOUT: "timeout: the script ran past its time limit",
    ZeroCause.OUT_OF_MEMORY: "out of memory: the script went over its memory limit",
    ZeroCause.MISBEHAVIOR: "misbehaviour: the student tampered",
    ZeroCause.UNMATCHED_PATTERNS: "unmatched patterns: a regex judge missed a pattern",
    ZeroCause.UNMET_CRITERIA: "unmet criteria: a rubric's criteria met add up to 0",
    ZeroCause.SCRIPT_ZERO: "a plain zero from the scoring script",
    ZeroCause.CUSTOM_ZERO: "a zero from a custom judge",
    ZeroCause.COMPILE_ERROR: "compile error: the program did not build, every test CE",
    ZeroCause.FAILED_TESTS: "failed tests: the program passed none of its tests",
    NO_CAUSE: "a zero without a recorded cause (scored before causes existed)",
}
"""What each cause means, as the report says it."""


def cause_name(result: JobResult) -> str | None:
    """The cause of a succeeded result's zero, as a name; ``None`` when it has none."""
    if result.status is not JobStatus.SUCCEEDED:
        return None
    if result.cause is not None:
        return str(result.cause)
    return NO_CAUSE if result.score == 0 else None


def group_value(metadata: Mapping[str, Any], key: str) -> str:
    """The value of ``key`` in a job's metadata, as text (``a.b`` reaches into objects)."""
    if key in metadata:
        value: Any = metadata[key]
    else:
        value = metadata
        for part in key.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return NO_VALUE
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


@dataclass(frozen=True)
class StepRate:
    """How one step (by position) fared across jobs."""

    number: int
    """From 1."""
    reached: int
    """Jobs that scored this step."""
    passed: int
    """Of those, the ones whose verdict continued (``continue_task``)."""
    mean: MeanCI | None
    zeros: int


@dataclass
class CriterionRate:
    """How one rubric criterion fared across jobs: its YES, NO and UNSCORED verdicts."""

    step: int
    number: int
    text: str
    yes: int = 0
    no: int = 0
    unscored: int = 0

    @property
    def graded(self) -> int:
        """Verdicts that are YES or NO."""
        return self.yes + self.no


@dataclass(frozen=True)
class Group:
    """The results sharing one value of the ``--by`` metadata key."""

    value: str
    jobs: int
    succeeded: int
    failed: int
    mean: MeanCI | None
    zeros: int
    grader_errors: int
    tokens: TokenUsage


@dataclass(frozen=True)
class Timing:
    """Percentiles of one timing (seconds) over the results that have it."""

    name: str
    n: int
    percentiles: dict[int, float]
    mean: float
    max: float


@dataclass
class TestTally:
    """The test cases of one language's ``tests`` judges: how many jobs, each verdict."""

    __test__ = False  # not a pytest test class, whatever its name

    jobs: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)

    @property
    def tests(self) -> int:
        """Test cases in all."""
        return sum(self.verdicts.values())


@dataclass
class Report:
    """Everything a report shows, computed once."""

    source: str
    """Where the results came from: a file, or a batch on a cluster."""
    jobs: int
    statuses: Counter[str]
    """Jobs by status (``queued``, ``running`` and ``unknown`` only for a batch)."""
    scores: list[float]
    mean: MeanCI | None
    bins: list[Bin]
    zeros: Counter[str]
    """Succeeded jobs with a zero (or failure verdict), by cause name."""
    cause_examples: dict[str, str]
    """A job id for each cause."""
    first_grader_error: tuple[str, str] | None
    steps: list[StepRate]
    criteria: list[CriterionRate]
    patterns: Counter[str]
    """How often each regex pattern was reported missing."""
    tokens: TokenUsage
    cost: float | None
    timings: list[Timing]
    by: str | None
    groups: list[Group]
    failures: Counter[str] = field(default_factory=Counter)
    """Failed jobs by error (the first line of it)."""
    tests: dict[str, TestTally] = field(default_factory=dict)
    """The ``tests`` judges' test cases, by language."""

    @property
    def grader_errors(self) -> int:
        """Zeros that are the grader's failure."""
        return self.zeros[ZeroCause.GRADER_ERROR]


def _steps(results: Sequence[JobResult]) -> list[StepRate]:
    depth = max((len(r.steps) for r in results), default=0)
    rates = []
    for index in range(depth):
        verdicts = [r.steps[index] for r in results if len(r.steps) > index]
        rates.append(
            StepRate(
                number=index + 1,
                reached=len(verdicts),
                passed=sum(v.continue_task for v in verdicts),
                mean=mean_ci([v.score for v in verdicts]),
                zeros=sum(v.score == 0 for v in verdicts),
            )
        )
    return rates


def _criteria(results: Sequence[JobResult]) -> tuple[list[CriterionRate], Counter[str]]:
    """Rubric verdicts by (step, criterion text), and missed regex patterns, over every step."""
    rates: dict[tuple[int, str], CriterionRate] = {}
    patterns: Counter[str] = Counter()
    for result in results:
        for index, step in enumerate(result.steps, start=1):
            metadata = step.metadata
            for key, verdict in metadata.items():
                match = _CRITERION.match(key)
                if match is None:
                    continue
                number = int(match.group(1))
                text = metadata.get(f"{key}_text", f"criterion {number}")
                rate = rates.setdefault((index, text), CriterionRate(index, number, text))
                word = verdict.split(":", 1)[0].strip()
                if word == "YES":
                    rate.yes += 1
                elif word == "NO":
                    rate.no += 1
                else:
                    rate.unscored += 1
            missed = metadata.get("unmatched_patterns")
            if missed:
                patterns.update(missed.split("\n"))
    ordered = sorted(rates.values(), key=lambda r: (r.step, r.number, r.text))
    return ordered, patterns


def _tests(results: Sequence[JobResult]) -> dict[str, TestTally]:
    tallies: dict[str, TestTally] = {}
    for result in results:
        for step in result.steps:
            if step.tests is None:
                continue
            tally = tallies.setdefault(step.metadata.get("language", "?"), TestTally())
            tally.jobs += 1
            tally.verdicts.update(test.verdict.value for test in step.tests)
    return dict(sorted(tallies.items()))


def _timings(results: Sequence[JobResult]) -> list[Timing]:
    found = []
    for name in TIMINGS:
        values = [r.timings[name] for r in results if name in r.timings]
        if values:
            found.append(
                Timing(
                    name=name,
                    n=len(values),
                    percentiles={q: percentile(values, q) for q in QUANTILES},
                    mean=sum(values) / len(values),
                    max=max(values),
                )
            )
    return found


def _groups(results: Sequence[JobResult], by: str) -> list[Group]:
    members: dict[str, list[JobResult]] = {}
    for result in results:
        members.setdefault(group_value(result.metadata, by), []).append(result)
    groups = []
    for value, group in members.items():
        succeeded = [r for r in group if r.status is JobStatus.SUCCEEDED]
        causes = [cause_name(r) for r in succeeded]
        groups.append(
            Group(
                value=value,
                jobs=len(group),
                succeeded=len(succeeded),
                failed=sum(r.status is JobStatus.FAILED for r in group),
                mean=mean_ci([r.score or 0.0 for r in succeeded]),
                zeros=sum(c is not None for c in causes),
                grader_errors=causes.count(ZeroCause.GRADER_ERROR),
                tokens=TokenUsage.sum(TokenUsage.of_result(r) for r in group),
            )
        )
    return sorted(groups, key=lambda g: (g.value == NO_VALUE, g.value))


def analyze(
    results: Sequence[JobResult],
    *,
    source: str,
    by: str | None = None,
    settings: ChalkSettings | None = None,
    unfinished: Mapping[str, int] | None = None,
) -> Report:
    """The report of ``results`` (one per job).

    ``unfinished`` counts jobs of a batch without a result yet, by state
    (``queued``, ``running``, ``unknown``). Costs are estimated at the prices of
    ``settings`` (none: no cost).
    """
    statuses: Counter[str] = Counter(str(r.status) for r in results)
    statuses.update(dict(unfinished or {}))
    succeeded = [r for r in results if r.status is JobStatus.SUCCEEDED]
    scores = [r.score or 0.0 for r in succeeded]
    zeros: Counter[str] = Counter()
    examples: dict[str, str] = {}
    first_grader_error = None
    for result in succeeded:
        cause = cause_name(result)
        if cause is None:
            continue
        zeros[cause] += 1
        examples.setdefault(cause, result.job_id)
        if result.grader_error and first_grader_error is None:
            assert result.scoring is not None
            message = result.scoring.metadata.get("error", "no error recorded")
            first_grader_error = (result.job_id, message)
    failures: Counter[str] = Counter(
        (r.error or "no error recorded").splitlines()[0][:300]
        for r in results
        if r.status is JobStatus.FAILED
    )
    criteria, patterns = _criteria(succeeded)
    tokens = TokenUsage.sum(TokenUsage.of_result(r) for r in results)
    return Report(
        source=source,
        jobs=sum(statuses.values()),
        statuses=statuses,
        scores=scores,
        mean=mean_ci(scores),
        bins=histogram(scores),
        zeros=zeros,
        cause_examples=examples,
        first_grader_error=first_grader_error,
        steps=_steps(succeeded),
        criteria=criteria,
        patterns=patterns,
        tokens=tokens,
        cost=None if settings is None else tokens.cost(settings),
        timings=_timings(results),
        by=by,
        groups=_groups(results, by) if by else [],
        failures=failures,
        tests=_tests(succeeded),
    )
