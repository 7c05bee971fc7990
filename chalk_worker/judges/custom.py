"""``CustomJudge``: a judge registered by name in a task package, built from its params."""

from __future__ import annotations

import asyncio
import inspect

from chalk_client.custom import Judge, registered_judge
from chalk_client.errors import JudgeError, UnknownJudgeError
from chalk_client.judge_specs import CustomJudge
from chalk_client.scoring import Scoring, ZeroCause
from chalk_worker.judges.base import JudgeContext, evaluator
from chalk_worker.judges.tasks_loader import failures_note


@evaluator("custom")
async def evaluate_custom(judge: CustomJudge, context: JudgeContext) -> Scoring:
    """Build the registered judge with ``params`` and let it evaluate the transcript."""
    try:
        factory = registered_judge(judge.name)
    except UnknownJudgeError as exc:
        raise UnknownJudgeError(f"{exc}.{failures_note()}") from None
    try:
        instance = factory(**judge.params)
    except TypeError as exc:
        raise JudgeError(f"custom judge {judge.name!r} did not accept its params: {exc}") from exc
    if not isinstance(instance, Judge):
        raise JudgeError(
            f"custom judge {judge.name!r} is registered with something that did not build a Judge "
            f"(got {type(instance).__name__}); register a Judge subclass"
        )
    instance.saved_submissions = context.saved_submissions
    instance.submission_dir = context.submission_dir
    outcome: object = await asyncio.to_thread(instance.evaluate, context.transcript)
    if inspect.isawaitable(outcome):
        outcome = await outcome
    if not isinstance(outcome, Scoring):
        raise JudgeError(
            f"custom judge {judge.name!r} returned {type(outcome).__name__}, not a Scoring"
        )
    if outcome.score == 0 and outcome.cause is None:
        return outcome.model_copy(update={"cause": ZeroCause.CUSTOM_ZERO})
    return outcome
