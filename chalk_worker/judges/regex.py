"""``RegexJudge``: every pattern must ``re.search`` the student's assistant text.

The searches run in the worker process's regex helpers (``chalk_worker.regex.pool``),
within ``regex_timeout_s``: a pattern that backtracks for ever on a hostile
transcript costs a helper, not the worker.
"""

from __future__ import annotations

from chalk_client.errors import JudgeError
from chalk_client.judge_specs import RegexJudge
from chalk_client.scoring import Scoring, ZeroCause
from chalk_worker.judges.base import JudgeContext, evaluator
from chalk_worker.regex.pool import regex_pool


@evaluator("regex")
async def evaluate_regex(judge: RegexJudge, context: JudgeContext) -> Scoring:
    """Score 1 when all patterns match, else 0 listing the patterns that did not.

    Only assistant text counts (string content and text blocks, joined with
    blank lines), from every step so far. Searches that do not finish within
    ``regex_timeout_s`` score 0 and stop the task, with the reason under ``error``.
    """
    patterns = judge.patterns
    if not patterns:
        return Scoring(score=1.0, metadata={}, continue_task=True)
    limit = context.settings.regex_timeout_s
    outcome = await regex_pool().search(
        [(pattern.pattern, pattern.flags) for pattern in patterns],
        context.transcript.assistant_text(),
        limit,
    )
    if outcome.error is not None:
        raise JudgeError(f"the regex judge could not search the transcript: {outcome.error}")
    if outcome.timed_out:
        index = outcome.timed_out_on
        if index is not None and 0 <= index < len(patterns):
            what = f"searching for the pattern {patterns[index].pattern!r}"
            advice = "simplify the pattern (nested repetition such as (a+)+ can take for ever)"
        else:
            what = "the search (it had not begun any pattern: a very large transcript?)"
            advice = "check the transcript's size"
        return Scoring.fail(
            "error",
            f"{what} did not finish within {limit:g} s (the limit regex_timeout_s, "
            f"CHALK_REGEX_TIMEOUT_S); {advice} or raise the limit",
            cause=ZeroCause.TIMEOUT,
        )
    missed = [patterns[index].pattern for index in outcome.unmatched]
    if missed:
        return Scoring(
            score=0.0,
            metadata={"unmatched_patterns": "\n".join(missed)},
            continue_task=False,
            cause=ZeroCause.UNMATCHED_PATTERNS,
        )
    return Scoring(score=1.0, metadata={}, continue_task=True)
