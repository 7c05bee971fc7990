"""``RegexJudge``: every pattern must ``re.search`` the student's assistant text."""

from __future__ import annotations

from chalk_client.judge_specs import RegexJudge
from chalk_client.scoring import Scoring
from chalk_worker.judges.base import JudgeContext, evaluator


@evaluator("regex")
async def evaluate_regex(judge: RegexJudge, context: JudgeContext) -> Scoring:
    """Score 1 when all patterns match, else 0 listing the patterns that did not.

    Only assistant text counts (string content and text blocks, joined with
    blank lines), from every step so far.
    """
    text = context.transcript.assistant_text()
    missed = [pattern.pattern for pattern in judge.patterns if pattern.search(text) is None]
    if missed:
        return Scoring(
            score=0.0,
            metadata={"unmatched_patterns": "\n".join(missed)},
            continue_task=False,
        )
    return Scoring(score=1.0, metadata={}, continue_task=True)
