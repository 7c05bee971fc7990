"""Reading rollout files (JSONL of jobs) and result files (JSONL of results)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from chalk_client.errors import InvalidJobError
from chalk_client.jobs import JobResult, JobStatus, ScoringJob, Step
from chalk_client.judge_specs import JudgeSpec

_judge_adapter: TypeAdapter[JudgeSpec] = TypeAdapter(JudgeSpec)
_steps_adapter: TypeAdapter[list[Step]] = TypeAdapter(list[Step])


@dataclass(frozen=True)
class DefaultJudge:
    """The judge (or steps) for rollout lines that bring none, from ``--judge``."""

    judge: JudgeSpec | None = None
    steps: list[Step] | None = None

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> DefaultJudge:
        """Read a judge object (``{"type": ...}``) or a list of steps from a JSON file."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InvalidJobError(f"could not read the judge file {path}: {exc}") from exc
        try:
            if isinstance(data, list):
                return cls(steps=_steps_adapter.validate_python(data))
            if isinstance(data, dict) and "steps" in data and "type" not in data:
                return cls(steps=_steps_adapter.validate_python(data["steps"]))
            return cls(judge=_judge_adapter.validate_python(data))
        except ValidationError as exc:
            raise InvalidJobError(f"the judge file {path} is not a valid judge:\n{exc}") from exc

    def apply(self, line: dict[str, Any]) -> dict[str, Any]:
        """The line with this judge filled in, if the line has neither judge nor steps."""
        if line.get("judge") is not None or line.get("steps") is not None:
            return line
        if self.judge is not None:
            return {**line, "judge": self.judge.model_dump(mode="json")}
        if self.steps is not None:
            return {**line, "steps": [s.model_dump(mode="json") for s in self.steps]}
        return line


@dataclass(frozen=True)
class BadLine:
    """A rollout line that is not a valid job."""

    number: int
    reason: str


def stable_id(raw_line: str) -> str:
    """The id of a rollout line without one: a hash of its text, the same on every run."""
    return "sha256-" + hashlib.sha256(raw_line.strip().encode("utf-8")).hexdigest()[:32]


def read_rollouts(
    path: str | os.PathLike[str], default: DefaultJudge | None = None
) -> Iterator[ScoringJob | BadLine]:
    """Each line of a JSONL file as a job (ids filled in), or a ``BadLine`` saying why not."""
    default = default or DefaultJudge()
    with open(path, encoding="utf-8") as lines:
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                data = json.loads(raw)
            except ValueError as exc:
                yield BadLine(number, f"not valid JSON: {exc}")
                continue
            except RecursionError:
                yield BadLine(number, "its JSON is nested too deeply to read")
                continue
            if not isinstance(data, dict):
                yield BadLine(number, "a rollout line must be a JSON object (a ScoringJob)")
                continue
            data = default.apply(data)
            if data.get("id") is None:
                data["id"] = stable_id(raw)
            try:
                job = ScoringJob.model_validate(data)
            except ValidationError as exc:
                yield BadLine(number, str(exc))
                continue
            except RecursionError:
                yield BadLine(number, "a value in it is nested too deeply to read")
                continue
            yield job


def scored_ids(path: str | os.PathLike[str]) -> set[str]:
    """Ids with a ``succeeded`` result in a results file; the file is rewritten without the rest.

    Failed results and a torn last line (an interrupted run) are dropped, so a
    re-run scores those jobs again and the file keeps one line per job.
    """
    results = Path(path)
    if not results.exists():
        return set()
    kept: list[str] = []
    done: set[str] = set()
    with results.open(encoding="utf-8") as lines:
        for raw in lines:
            try:
                result = JobResult.model_validate_json(raw)
            except ValidationError:
                continue
            if result.status is JobStatus.SUCCEEDED and result.job_id not in done:
                done.add(result.job_id)
                kept.append(raw if raw.endswith("\n") else raw + "\n")
    partial = results.with_name(results.name + ".partial")
    partial.write_text("".join(kept), encoding="utf-8")
    partial.replace(results)
    return done
