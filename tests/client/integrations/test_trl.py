"""The TRL reward function, called exactly as ``GRPOTrainer`` calls reward functions.

TRL is not installed: these tests follow its documented calling convention
(``GRPOTrainer._calculate_rewards``): every argument by keyword, ``prompts``
and ``completions`` as text or chat messages, ``completion_ids``, each other
dataset column as a list with one value per completion, ``trainer_state``,
``log_extra`` and ``log_metric``; an ``async def`` reward function is run with
``asyncio.run_coroutine_threadsafe`` on an event loop in a daemon thread.
Rubric judges grade against the loopback chat-completions server.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from chalk_client.errors import (
    ConfigurationError,
    InvalidJobError,
    LLMUnavailableError,
    UnknownJudgeError,
)
from chalk_client.integrations.submissions import TextSubmission
from chalk_client.integrations.trl import async_reward_function, reward_function
from chalk_client.judges import CustomJudge, RegexJudge, RubricJudge
from chalk_worker.llm.client import close_llm_clients
from chalk_worker.testing.fake_openai import FakeOpenAI, Reply


def trainer_kwargs(
    prompts: list[Any], completions: list[Any], **columns: list[Any]
) -> dict[str, Any]:
    """What GRPOTrainer passes: its extras, and the dataset columns (repeated per completion)."""
    metrics: list[tuple[str, float]] = []
    return {
        "prompts": prompts,
        "completions": completions,
        "completion_ids": [[7, 8, 9] for _ in completions],
        **columns,
        "trainer_state": SimpleNamespace(global_step=3, epoch=0.1),
        "log_extra": lambda column, values: None,
        "log_metric": lambda name, value: metrics.append((name, value)),
        "_metrics": metrics,
    }


def call(reward: Any, kwargs: dict[str, Any]) -> list[float | None]:
    """Call ``reward`` as the trainer's sync path does (and convert ``None`` as it does)."""
    given = {k: v for k, v in kwargs.items() if k != "_metrics"}
    output = reward(**given)
    assert isinstance(output, list) and len(output) == len(kwargs["completions"])
    assert all(r is None or isinstance(r, float) for r in output)
    return output


def test_standard_format_rewards_come_back_in_order_with_a_judge_per_row():
    reward = reward_function(judge=lambda s: RegexJudge([re.escape(s.columns["ground_truth"])]))
    kwargs = trainer_kwargs(
        prompts=["2+2=", "3+3=", "2+2=", "3+3="],
        completions=[" 4", " 7", " 5", " 6"],
        ground_truth=["4", "6", "4", "6"],
    )
    assert call(reward, kwargs) == [1.0, 0.0, 0.0, 1.0]
    assert [r.status for r in reward.last_results] == ["succeeded"] * 4
    assert kwargs["_metrics"] == [("chalk_reward/failed", 0.0)]


def test_conversational_format_scores_the_assistant_s_messages():
    reward = reward_function(judge=RegexJudge([r"\bParis\b"]))
    prompts = [
        [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Capital?"}]
    ] * 2
    completions = [
        [{"role": "assistant", "content": "Paris."}],
        [{"role": "assistant", "content": "Lyon."}],
    ]
    assert call(reward, trainer_kwargs(prompts, completions)) == [1.0, 0.0]


def test_the_prompt_is_not_graded_as_the_model_s_answer():
    reward = reward_function(judge=RegexJudge(["Paris"]))
    assert call(reward, trainer_kwargs(["Is it Paris?"], ["No."])) == [0.0]


def test_the_reward_function_has_the_name_trl_logs():
    assert reward_function(judge=RegexJudge(["x"])).__name__ == "chalk_reward"
    assert reward_function(judge=RegexJudge(["x"]), name="exact").__name__ == "exact"


def test_a_none_completion_is_the_failed_value_and_the_others_are_scored(caplog):
    reward = reward_function(judge=RegexJudge(["42"]))
    with caplog.at_level(logging.WARNING, "chalk_client.integrations"):
        rewards = call(reward, trainer_kwargs(["q", "q", "q"], ["42", None, "41"]))
    assert rewards == [1.0, None, 0.0]
    assert "1 of 3 samples could not be scored" in caplog.text
    assert "the completion is None" in caplog.text
    zero = reward_function(judge=RegexJudge(["42"]), failed_value=0.0)
    assert call(zero, trainer_kwargs(["q", "q"], [None, "42"])) == [0.0, 1.0]


def test_a_completion_of_the_wrong_type_is_the_failed_value():
    reward = reward_function(judge=RegexJudge(["42"]))
    assert call(reward, trainer_kwargs(["q", "q"], [{"oops": 1}, "42"])) == [None, 1.0]


def test_a_missing_column_is_a_clear_error_at_the_first_call_before_anything_runs():
    reward = reward_function(
        judge=RegexJudge(["42"]), submission=TextSubmission(files_from_columns={"t.py": "tests"})
    )
    with pytest.raises(ConfigurationError, match=r"no column 'tests'.*ground_truth"):
        call(reward, trainer_kwargs(["q"], ["42"], ground_truth=["42"]))
    assert reward.last_results == []
    declared = reward_function(judge=RegexJudge(["42"]), columns=["answer"])
    with pytest.raises(ConfigurationError, match="no column 'answer'"):
        call(declared, trainer_kwargs(["q"], ["42"]))


def test_a_row_s_judge_that_cannot_be_built_fails_that_row_only():
    reward = reward_function(judge=lambda s: RegexJudge([s.columns["pattern"]]))
    rewards = call(reward, trainer_kwargs(["q", "q"], ["a(", "b"], pattern=["a(", "b"]))
    assert rewards == [None, 1.0]
    assert "patterns.0: invalid regular expression 'a('" in reward.last_results[0].error


def test_judges_that_cannot_work_here_are_refused_when_the_function_is_made(monkeypatch):
    with pytest.raises(InvalidJobError, match="does not match any of the expected tags"):
        reward_function(judge={"type": "regexp", "patterns": ["x"]})
    with pytest.raises(UnknownJudgeError, match="no custom judge named 'nowhere'"):
        reward_function(judge=CustomJudge("nowhere"))
    with pytest.raises(InvalidJobError, match="could not read the judge file"):
        reward_function(judge="no-such-judge.json")
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "CHALK_LLM_API_KEY", "CHALK_LLM_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(LLMUnavailableError, match="OPENAI_API_KEY"):
        reward_function(judge=RubricJudge(rubric=[{"criterion": "c"}]))


def test_prompts_and_completions_must_pair_up():
    reward = reward_function(judge=RegexJudge(["x"]))
    with pytest.raises(ValueError, match="2 prompts for 1 completions"):
        reward(prompts=["a", "b"], completions=["x"])


def test_a_rubric_reward_grades_every_completion_against_the_llm():
    with FakeOpenAI(latency_s=0.01) as fake:
        reward = reward_function(
            judge=RubricJudge(
                rubric=[
                    {"criterion": "It is correct (met)", "weight": 0.7},
                    {"criterion": "It is polite", "weight": 0.3},
                ]
            ),
            settings=fake.settings(),
        )
        rewards = call(reward, trainer_kwargs(["q"] * 8, [f"answer {n}" for n in range(8)]))
    assert rewards == [pytest.approx(0.7)] * 8
    assert fake.calls == 16
    assert all(f"answer {n}" in "".join(s.prompt for s in fake.requests) for n in range(8))


def test_jobs_that_fail_count_as_the_failed_value_and_are_logged_never_raised(caplog):
    def answer(seen):
        return Reply(status=500) if "broken" in seen.first_user_message else None

    with FakeOpenAI(answer=answer) as fake:
        reward = reward_function(
            judge=RubricJudge(rubric=[{"criterion": "correct (met)"}]),
            settings=fake.settings(llm_max_retries=0),
        )
        kwargs = trainer_kwargs(["q"] * 3, ["fine", "broken", "fine"])
        with caplog.at_level(logging.WARNING, "chalk_client.integrations"):
            rewards = call(reward, kwargs)
    assert rewards == [1.0, None, 1.0]
    assert reward.last_results[1].status == "failed"
    assert "HTTP 500" in reward.last_results[1].error
    assert "1 of 3 samples could not be scored" in caplog.text
    assert kwargs["_metrics"] == [("chalk_reward/failed", pytest.approx(1 / 3))]


def run_like_trl(reward: Any, kwargs: dict[str, Any]) -> list[float | None]:
    """GRPOTrainer's async path: its own loop in a daemon thread, run_coroutine_threadsafe."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        given = {k: v for k, v in kwargs.items() if k != "_metrics"}
        return asyncio.run_coroutine_threadsafe(reward(**given), loop).result(timeout=60)
    finally:
        # A trainer's loop lives as long as its process; this one ends with the test.
        asyncio.run_coroutine_threadsafe(close_llm_clients(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


def test_the_async_variant_is_a_coroutine_function_trl_awaits_on_its_own_loop():
    reward = async_reward_function(
        judge=lambda s: RegexJudge([re.escape(s.columns["answer"])]), name="async_exact"
    )
    assert inspect.iscoroutinefunction(reward)
    assert reward.__name__ == "async_exact"
    kwargs = trainer_kwargs(["q"] * 3, ["1", "2", None], answer=["1", "3", "3"])
    assert run_like_trl(reward, kwargs) == [1.0, 0.0, None]
    assert [r.status for r in reward.last_results] == ["succeeded", "succeeded", "failed"]


def test_the_async_variant_grades_rubrics_on_the_trainer_s_loop():
    with FakeOpenAI(latency_s=0.01) as fake:
        reward = async_reward_function(
            judge=RubricJudge(rubric=[{"criterion": "good (met)"}]), settings=fake.settings()
        )
        assert run_like_trl(reward, trainer_kwargs(["q"] * 4, ["a", "b", "c", "d"])) == [1.0] * 4
    assert fake.calls == 4


def test_an_empty_batch_is_an_empty_list():
    assert reward_function(judge=RegexJudge(["x"]))(prompts=[], completions=[]) == []
