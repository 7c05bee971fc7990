"""``RubricJudge``: LLM grading is not in this version yet; such jobs fail clearly."""

from __future__ import annotations

from chalk_client.errors import RubricUnavailableError
from chalk_client.judge_specs import RubricJudge
from chalk_client.scoring import Scoring
from chalk_worker.judges.base import JudgeContext, evaluator


@evaluator("rubric")
async def evaluate_rubric(judge: RubricJudge, context: JudgeContext) -> Scoring:
    """Refuse: this worker cannot grade rubrics yet, and a guess would be worse than a failure."""
    raise RubricUnavailableError(
        "RubricJudge cannot be scored by this version of Chalk Queue: the LLM rubric evaluator "
        "is not available yet. Score this job with executable, regex or custom judges for now."
    )
