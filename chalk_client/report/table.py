"""The report's table of results: a row per job for the page, and a flat CSV for pandas.

The page gets excerpts (the head and tail of long texts), so that a report of
many thousands of jobs stays a file a browser opens quickly; the full texts
stay in the results file. The CSV has one column per field, timing and token
count, and one per key of the jobs' own metadata (``metadata.KEY``).
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from typing import Any

from chalk_client.jobs import JobResult
from chalk_client.report.analysis import TIMINGS, cause_name, group_value
from chalk_client.usage import TokenUsage

EXCERPT_CHARS = 1200
"""Longest text shown whole on the page; longer ones keep their head and tail."""
HEAD_CHARS = 400
VALUE_CHARS = 600
"""Longest metadata value shown whole on the page."""
OUTPUTS = ("stdout", "stderr")
TESTS_SHOWN = 300
"""Tests of a step listed on the page (all of them are in the results file)."""


def excerpt(text: str, limit: int = EXCERPT_CHARS, head: int = HEAD_CHARS) -> str:
    """``text``, or its first ``head`` and last characters with a marker saying how much went."""
    if len(text) <= limit:
        return text
    tail = limit - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut:,} characters cut ...]\n{text[-tail:]}"


def page_row(result: JobResult, by: str | None) -> dict[str, Any]:
    """One job as the page's script shows it (short keys: the page holds many of them)."""
    steps = []
    for step in result.steps:
        reasons = {
            key: excerpt(value, VALUE_CHARS, VALUE_CHARS // 2)
            for key, value in step.metadata.items()
            if key not in OUTPUTS
        }
        row: dict[str, Any] = {
            "sc": step.score,
            "ct": step.continue_task,
            "ca": None if step.cause is None else str(step.cause),
            "m": reasons,
            "out": excerpt(step.metadata.get("stdout", "")),
            "err": excerpt(step.metadata.get("stderr", "")),
        }
        if step.tests is not None:
            row["ts"] = [
                [t.verdict.value, t.cpu_s, t.wall_s, t.memory_mb, t.exit_code, t.retried, t.detail]
                for t in step.tests[:TESTS_SHOWN]
            ]
            row["tn"] = len(step.tests)
        if step.compile is not None:
            row["cp"] = {
                "ok": step.compile.ok,
                "s": step.compile.seconds,
                "c": step.compile.cached,
                "e": excerpt(step.compile.stderr),
            }
        steps.append(row)
    return {
        "id": result.job_id,
        "st": str(result.status),
        "sc": result.score,
        "ca": cause_name(result),
        "g": group_value(result.metadata, by) if by else None,
        "t": result.timings.get("total"),
        "w": result.worker,
        "a": result.attempts,
        "e": None if result.error is None else excerpt(result.error),
        "steps": steps,
        "md": excerpt(json.dumps(result.metadata, ensure_ascii=False, sort_keys=True, indent=1)),
    }


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def write_csv(results: Sequence[JobResult], path: str | os.PathLike[str]) -> None:
    """Write ``results`` as CSV: one row per job, one column per field (UTF-8, with a header)."""
    keys = sorted({key for result in results for key in result.metadata})
    depth = max((len(result.steps) for result in results), default=0)
    header = [
        "job_id",
        "status",
        "score",
        "cause",
        "grader_error",
        "continue_task",
        "error",
        "steps_scored",
        "attempts",
        "worker",
        *(f"seconds_{name}" for name in TIMINGS),
        "prompt_tokens",
        "completion_tokens",
        *(
            f"step_{n}_{what}"
            for n in range(1, depth + 1)
            for what in ("score", "cause", "verdicts")
        ),
        *(f"metadata.{key}" for key in keys),
    ]
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for result in results:
            tokens = TokenUsage.of_result(result)
            steps: list[Any] = []
            for index in range(depth):
                step = result.steps[index] if index < len(result.steps) else None
                steps += [
                    "" if step is None else step.score,
                    "" if step is None or step.cause is None else str(step.cause),
                    ""
                    if step is None or step.tests is None
                    else " ".join(t.verdict.value for t in step.tests),
                ]
            writer.writerow(
                [
                    result.job_id,
                    str(result.status),
                    "" if result.score is None else result.score,
                    cause_name(result) or "",
                    result.grader_error,
                    "" if result.scoring is None else result.scoring.continue_task,
                    result.error or "",
                    len(result.steps),
                    result.attempts,
                    result.worker or "",
                    *(result.timings.get(name, "") for name in TIMINGS),
                    tokens.prompt,
                    tokens.completion,
                    *steps,
                    *(
                        _text(result.metadata[key]) if key in result.metadata else ""
                        for key in keys
                    ),
                ]
            )
