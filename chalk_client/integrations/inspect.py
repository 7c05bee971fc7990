"""inspect_ai: a Chalk judge as an inspect ``Scorer``.

    from inspect_ai import Task, eval
    from chalk_client.integrations.inspect import chalk_scorer
    from chalk_client.judges import RubricJudge

    task = Task(dataset=..., solver=..., scorer=chalk_scorer(
        judge=RubricJudge(rubric=[{"criterion": "The answer names the root cause."}])))
    eval(task, model="openai/gpt-4o-mini")

Each sample's messages become the job's transcript; ``submission`` builds its
files from a ``Sample`` whose completion is those messages and whose columns
are the sample's metadata, then ``target``, ``targets`` (all of them),
``input``, ``sample_id`` and ``epoch``. The job is scored in this process (on
inspect's own event loop, beside its model calls) or, with ``redis_url``, on a
cluster. The result becomes inspect's ``Score``: the job's score as ``value``,
the final completion as ``answer``, the judges' reasons as ``explanation``,
and the job id, steps and metadata as ``metadata``. A job that ``failed`` (no
verdict: an LLM that could not be reached, a missing custom judge) raises
``JudgeError``, which inspect records as the sample's error, not as a zero: set
``fail_on_error`` or ``retry_on_error`` of ``eval()`` to say what it does then.
Needs inspect's asyncio backend (its default).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from pydantic import SecretStr

from chalk_client.errors import JudgeError, MissingExtraError
from chalk_client.integrations.inspect_logs import message_dicts
from chalk_client.integrations.samples import Sample
from chalk_client.integrations.scorer import (
    DEFAULT_TIMEOUT_S,
    JudgeForSample,
    JudgeSource,
    SampleScorer,
    TranscriptBuilder,
)
from chalk_client.integrations.submissions import SubmissionBuilder
from chalk_client.jobs import JobResult, JobStatus
from chalk_client.scoring import Scoring
from chalk_client.settings import ChalkSettings

try:
    from inspect_ai.scorer import Score, Scorer, Target, mean, scorer, stderr
    from inspect_ai.solver import TaskState
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError(
        "chalk_client.integrations.inspect needs inspect_ai: pip install 'chalk-queue[inspect]'"
    ) from exc

log = logging.getLogger("chalk_client.integrations")

_QUIET = ("stdout", "stderr", "rubric_", "_prompt_tokens", "_completion_tokens", "_text")
"""Metadata left out of explanations (it stays in the score's metadata)."""


def _reasons(step: Scoring) -> list[str]:
    metadata = step.metadata
    lines = []
    for key, value in metadata.items():
        if key.startswith("criterion_") and key.count("_") == 1:
            criterion = metadata.get(f"{key}_text", key)
            lines.append(f"{criterion}: {value}")
        elif not any(part in key for part in _QUIET):
            lines.append(f"{key}: {value}")
    return lines


def explain(result: JobResult) -> str:
    """The judges' reasons, step by step: each rubric criterion with its verdict, then
    the other metadata (scripts' output and token counts left out)."""
    lines: list[str] = []
    for number, step in enumerate(result.steps, start=1):
        header = f"step {number}: score {step.score:g}" if len(result.steps) > 1 else ""
        reasons = _reasons(step)
        lines.extend([header] if header else [])
        lines.extend(reasons or ([] if header else [f"score {step.score:g}"]))
    return "\n".join(lines)


def sample_of(state: TaskState, target: Target) -> Sample:
    """An inspect sample as a ``Sample`` (see the module's docstring for its columns)."""
    columns: dict[str, Any] = {
        **state.metadata,
        "target": target.text,
        "targets": list(target),
        "input": state.input_text,
        "sample_id": state.sample_id,
        "epoch": state.epoch,
    }
    return Sample(completion=message_dicts(state.messages), columns=columns)


def _score(state: TaskState, result: JobResult) -> Score:
    if result.status is not JobStatus.SUCCEEDED or result.scoring is None:
        raise JudgeError(
            f"Chalk could not score sample {state.sample_id!r} (epoch {state.epoch}): "
            f"{result.error}"
        )
    return Score(
        value=result.scoring.score,
        answer=state.output.completion,
        explanation=explain(result),
        metadata={
            "chalk_job_id": result.job_id,
            "continue_task": result.scoring.continue_task,
            "steps": [step.model_dump(mode="json") for step in result.steps],
            "timings": result.timings,
        },
    )


@scorer(metrics=[mean(), stderr()])
def chalk_scorer(
    judge: JudgeSource | JudgeForSample,
    *,
    submission: SubmissionBuilder | None = None,
    transcript: TranscriptBuilder | None = None,
    submission_paths: Sequence[str] = (),
    columns: Sequence[str] = (),
    redis_url: str | SecretStr | None = None,
    settings: ChalkSettings | None = None,
    concurrency: int | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Scorer:
    """An inspect scorer grading each sample with ``judge`` (mean and stderr of the scores).

    ``judge``: a judge, its JSON object, a list of steps, a judge file's path,
    or a function of the ``Sample`` returning a judge (from
    ``sample.columns["target"]``, say). ``submission`` builds the sample's
    files (e.g. ``CodeBlockSubmission("solution.py")`` from the last code block
    the model wrote); ``transcript`` its transcript (default: the sample's
    messages); ``submission_paths`` are the files judges get; ``columns`` the
    metadata fields every sample must have. ``redis_url``: score on that
    cluster, waiting up to ``timeout_s``; without it, in this process, with
    ``settings``. inspect records a scorer's arguments in the eval log: give a
    URL holding a password as ``SecretStr(url)`` (pydantic's), which it records
    as ``SecretStr``. Raises now what every job would fail with (``InvalidJobError``;
    scoring here, ``UnknownJudgeError``, ``CommandRefusedError``,
    ``LLMUnavailableError``).
    """
    if isinstance(redis_url, str) and urlsplit(redis_url).password:
        log.warning(
            "chalk_scorer: inspect writes a scorer's arguments into the eval log, so the "
            "password in redis_url will be there; pass redis_url=SecretStr(url) (from pydantic) "
            "to keep it out"
        )
    chalk = SampleScorer(
        judge,
        submission=submission,
        transcript=transcript,
        submission_paths=submission_paths,
        columns=columns,
        redis_url=redis_url,
        settings=settings,
        concurrency=concurrency,
        timeout_s=timeout_s,
        source="inspect",
    )

    async def score(state: TaskState, target: Target) -> Score:
        sample = sample_of(state, target)
        chalk.check_columns(sample.columns)
        [result] = await chalk.score_async([sample])
        return _score(state, result)

    return score
