"""``RubricJudge``: one LLM call per criterion, all at once; the score sums the weights met.

Metadata, for criterion ``i`` (counted from 1, in rubric order):

- ``criterion_i``: ``"YES: <reason>"``, ``"NO: <reason>"`` or ``"UNSCORED: <why>"``;
- ``criterion_i_text``: the criterion itself;
- ``criterion_i_prompt_tokens``, ``criterion_i_completion_tokens``: what its
  requests used (0 when the verdict was remembered);

and for the judge: ``rubric_model``, ``rubric_calls`` (requests made; 0 when
every verdict was remembered), ``rubric_cached`` (criteria answered by the
verdict cache), ``rubric_prompt_tokens``, ``rubric_completion_tokens`` (all
criteria together; ``chalk_client.usage`` sums them per job and batch) and,
when some criterion got no verdict and the
operator chose ``CHALK_RUBRIC_NO_VERDICT=unscored``, ``unscored_criteria``
(their numbers). ``continue_task`` is ``score >= continue_threshold`` (by
default -1: the task always continues).

A server that cannot be reached, refuses, or misses the deadline fails the job
(``LLMUnavailableError``); so does a criterion without a YES or NO after asking
again (``NoVerdictError``), unless the operator chose ``unscored``. The deadline
(``CHALK_RUBRIC_DEADLINE_S``) is a budget of time in rubric grading, shared by
the rubric judges of one job (``LLMBudget``).
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from typing import TYPE_CHECKING

from chalk_client.errors import LLMUnavailableError, NoVerdictError
from chalk_client.judge_specs import RubricJudge
from chalk_client.scoring import Scoring, ZeroCause
from chalk_client.usage import COMPLETION_TOKENS, PROMPT_TOKENS
from chalk_worker.judges.base import JudgeContext, LLMBudget, evaluator
from chalk_worker.judges.contexts import render_contexts
from chalk_worker.judges.hooks import HOOKS

if TYPE_CHECKING:
    from chalk_worker.llm.verdicts import Verdict


def _label(verdict: Verdict) -> str:
    word = "UNSCORED" if verdict.met is None else "YES" if verdict.met else "NO"
    return f"{word}: {verdict.reason}" if verdict.reason else word


@evaluator("rubric")
async def evaluate_rubric(judge: RubricJudge, context: JudgeContext) -> Scoring:
    """Grade every criterion concurrently and sum the weights of those met."""
    settings = context.settings
    budget = context.llm_budget or LLMBudget(settings.rubric_deadline_s)
    started = time.monotonic()
    try:
        return await _grade_all(judge, context, deadline=started + budget.left)
    except LLMUnavailableError as exc:
        from chalk_worker.llm.client import SETTINGS_NOTE

        # The user reading this may have set OPENAI_* where the client runs, not here.
        where = f"{socket.gethostname()}:{os.getpid()}"
        raise LLMUnavailableError(f"{exc}. {SETTINGS_NOTE.format(worker=where)}") from exc
    finally:
        budget.spent += time.monotonic() - started


async def _grade_all(judge: RubricJudge, context: JudgeContext, *, deadline: float) -> Scoring:
    # The LLM client (``openai``) is imported when a rubric is first graded: a process
    # that never grades one (``chalk score`` with regex judges) starts without it.
    from chalk_worker.llm.client import LLMServer, llm_pool
    from chalk_worker.llm.verdicts import ask_verdict

    settings = context.settings
    shown = await asyncio.to_thread(
        render_contexts,
        judge.context,
        context.transcript,
        context.saved_submissions,
        context.submission_dir,
    )
    server = LLMServer.from_settings(settings)
    pool = llm_pool(settings)
    model = judge.model or settings.rubric_model
    verdicts: dict[int, Verdict] = {}

    async def grade(number: int, criterion: str) -> None:
        verdict = await ask_verdict(
            pool,
            server,
            model=model,
            criterion=criterion,
            context=shown,
            settings=settings,
            deadline=deadline,
        )
        if verdict.met is None and settings.rubric_no_verdict == "fail":
            raise NoVerdictError(
                f"criterion {number} ({criterion!r:.120}) could not be graded by {model!r}: "
                f"{verdict.reason}. Set CHALK_RUBRIC_NO_VERDICT=unscored to record such "
                "criteria as unscored instead of failing the job"
            )
        verdicts[number] = verdict

    try:
        async with asyncio.timeout(deadline - time.monotonic()):
            async with asyncio.TaskGroup() as group:
                for number, item in enumerate(judge.rubric, start=1):
                    group.create_task(grade(number, item.criterion))
    except TimeoutError:
        waiting = [str(n) for n in range(1, len(judge.rubric) + 1) if n not in verdicts]
        problem = pool.last_problem.get(server.base_url)
        seen = (
            f"; the server last answered {problem}"
            if problem
            else "; it may be unreachable or slow (an attempt may take "
            f"CHALK_LLM_REQUEST_TIMEOUT_S = {settings.llm_request_timeout_s:g} s)"
        )
        raise LLMUnavailableError(
            f"rubric grading missed its deadline of {settings.rubric_deadline_s:g} s "
            f"(CHALK_RUBRIC_DEADLINE_S): criteria {', '.join(waiting)} still had no answer "
            f"from {server.base_url} (model {model!r}){seen}"
        ) from None
    except BaseExceptionGroup as failures:
        raise failures.exceptions[0] from None

    HOOKS.rubric_verdicts(model, verdicts.values())
    metadata: dict[str, str] = {}
    score = 0.0
    for number, item in enumerate(judge.rubric, start=1):
        verdict = verdicts[number]
        metadata[f"criterion_{number}"] = _label(verdict)
        metadata[f"criterion_{number}_text"] = item.criterion
        metadata[f"criterion_{number}_prompt_tokens"] = str(verdict.prompt_tokens)
        metadata[f"criterion_{number}_completion_tokens"] = str(verdict.completion_tokens)
        if verdict.met:
            score += item.weight
    unscored = [str(n) for n, verdict in sorted(verdicts.items()) if verdict.met is None]
    if unscored:
        metadata["unscored_criteria"] = ", ".join(unscored)
    metadata["rubric_model"] = model
    metadata["rubric_calls"] = str(sum(v.calls for v in verdicts.values()))
    metadata["rubric_cached"] = str(sum(v.cached for v in verdicts.values()))
    metadata[PROMPT_TOKENS] = str(sum(v.prompt_tokens for v in verdicts.values()))
    metadata[COMPLETION_TOKENS] = str(sum(v.completion_tokens for v in verdicts.values()))
    return Scoring(
        score=score,
        metadata=metadata,
        continue_task=score >= judge.continue_threshold,
        cause=ZeroCause.UNMET_CRITERIA if score == 0 else None,
    )
