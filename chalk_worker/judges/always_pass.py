"""``AlwaysPassJudge``: scores 1 and continues."""

from __future__ import annotations

from chalk_client.judge_specs import AlwaysPassJudge
from chalk_client.scoring import Scoring
from chalk_worker.judges.base import JudgeContext, evaluator


@evaluator("always_pass")
async def evaluate_always_pass(judge: AlwaysPassJudge, context: JudgeContext) -> Scoring:
    """Pass, whatever happened."""
    return Scoring(score=1.0, metadata={}, continue_task=True)
