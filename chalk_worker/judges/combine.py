"""``all`` (``a & b``) and ``any`` (``a | b``), judged by ``continue_task`` like ``and``/``or``."""

from __future__ import annotations

from chalk_client.judge_specs import AllJudge, AnyJudge
from chalk_client.scoring import Scoring
from chalk_worker.judges.base import JudgeContext, evaluate, evaluator


@evaluator("all")
async def evaluate_all(judge: AllJudge, context: JudgeContext) -> Scoring:
    """Run in order; return the first failing verdict, or the last if all pass."""
    scoring = Scoring(score=1.0)
    for part in judge.judges:
        scoring = await evaluate(part, context)
        if not scoring.continue_task:
            break
    return scoring


@evaluator("any")
async def evaluate_any(judge: AnyJudge, context: JudgeContext) -> Scoring:
    """Run in order; return the first passing verdict, or the last if all fail."""
    scoring = Scoring(score=0.0, continue_task=False)
    for part in judge.judges:
        scoring = await evaluate(part, context)
        if scoring.continue_task:
            break
    return scoring
