"""Regex, always-pass, custom and combined judges, and a rubric whose server is down."""

from __future__ import annotations

import re
import socket

import pytest
from support import say

from chalk_client import JobStatus, Message, Scoring, Transcript
from chalk_client.judges import (
    AlwaysPassJudge,
    CustomJudge,
    Judge,
    RegexJudge,
    RubricJudge,
    StudentMisbehaviorError,
    register_judge,
)
from chalk_client.scoring import ZeroCause

calls: list[str] = []


@register_judge("test_verdict")
class VerdictJudge(Judge):
    """Returns a fixed verdict and records that it ran."""

    def __init__(self, label: str, score: float, passed: bool) -> None:
        self.label, self.score, self.passed = label, score, passed

    def evaluate(self, transcript: Transcript) -> Scoring:
        calls.append(self.label)
        return Scoring(score=self.score, metadata={"label": self.label}, continue_task=self.passed)


@register_judge("test_tamper")
class TamperJudge(Judge):
    def evaluate(self, transcript: Transcript) -> Scoring:
        raise StudentMisbehaviorError("answer.txt is a symlink")


@register_judge("test_broken")
class BrokenJudge(Judge):
    def evaluate(self, transcript: Transcript) -> Scoring:
        raise ValueError("bug in the judge")


@register_judge("test_cause")
class CauseJudge(Judge):
    def __init__(self, cause: str) -> None:
        self.cause = ZeroCause(cause)

    def evaluate(self, transcript: Transcript) -> Scoring:
        return Scoring(score=0, metadata={}, continue_task=False, cause=self.cause)


@register_judge("test_files")
class FilesJudge(Judge):
    def evaluate(self, transcript: Transcript) -> Scoring:
        first = self.saved_submissions[0]
        text = first.read_text() if first.exists() else "<missing>"
        return Scoring(score=1.0, metadata={"text": text, "dir": str(self.submission_dir)})


def verdict(label: str, score: float, passed: bool) -> CustomJudge:
    return CustomJudge("test_verdict", {"label": label, "score": score, "passed": passed})


@pytest.fixture(autouse=True)
def _clear_calls():
    calls.clear()


def test_always_pass_scores_one_and_continues(score):
    result = score(judge=AlwaysPassJudge())
    assert result.status is JobStatus.SUCCEEDED
    assert result.scoring == Scoring(score=1.0, metadata={}, continue_task=True)


def test_regex_passes_when_every_pattern_matches(score):
    result = score(
        transcript=say("The answer: 42", "done"),
        judge=RegexJudge([re.compile(r"answer: 42"), r"\bdone$"]),
    )
    assert result.scoring.score == 1.0 and result.scoring.continue_task


def test_regex_fails_and_lists_the_patterns_that_did_not_match(score):
    result = score(transcript=say("answer: 41"), judge=RegexJudge([r"answer: 4\d", r"\b42\b", "x"]))
    assert result.status is JobStatus.SUCCEEDED
    assert result.scoring.score == 0.0 and result.scoring.continue_task is False
    assert result.scoring.metadata["unmatched_patterns"].split("\n") == [r"\b42\b", "x"]
    assert result.cause is ZeroCause.UNMATCHED_PATTERNS and not result.grader_error


def test_regex_ignores_everything_but_assistant_text(score):
    transcript = Transcript(
        messages=[
            Message(role="system", content="secret: 42"),
            Message(role="user", content="secret: 42"),
            Message(
                role="assistant",
                content=[
                    {"type": "reasoning", "text": "secret: 42"},
                    {"type": "thinking", "thinking": "secret: 42"},
                    {"type": "tool_use", "name": "t", "input": {"a": "secret: 42"}},
                    {"type": "image", "alt": "secret: 42"},
                    {"type": "text", "text": "visible"},
                ],
                tool_calls=[
                    {"type": "function", "function": {"name": "f", "arguments": "secret: 42"}}
                ],
            ),
            Message(role="user", content=[{"type": "tool_result", "content": "secret: 42"}]),
            Message(role="tool", content="secret: 42"),
        ]
    )
    assert score(transcript=transcript, judge=RegexJudge(["secret: 42"])).scoring.score == 0.0
    assert score(transcript=transcript, judge=RegexJudge(["visible"])).scoring.score == 1.0


def test_regex_joins_messages_and_blocks_with_blank_lines(score):
    transcript = Transcript(
        messages=[
            Message(role="assistant", content="one"),
            Message(
                role="assistant",
                content=[{"type": "text", "text": "two"}, {"type": "text", "text": "three"}],
            ),
        ]
    )
    assert (
        score(transcript=transcript, judge=RegexJudge([r"one\n\ntwo\n\nthree"])).scoring.score == 1
    )


def test_regex_sees_assistant_text_from_earlier_steps(score):
    result = score(
        transcript=say("step one: 7", "step two: 9"),
        steps=[{"judge": AlwaysPassJudge()}, {"judge": RegexJudge(["one: 7", "two: 9"])}],
    )
    assert [s.score for s in result.steps] == [1.0, 1.0]


def test_and_stops_at_the_first_failure_and_returns_it(score):
    judge = verdict("a", 1, True) & verdict("b", 0.25, False) & verdict("c", 1, True)
    result = score(judge=judge)
    assert calls == ["a", "b"]
    assert result.scoring.metadata == {"label": "b"} and result.scoring.score == 0.25
    assert result.scoring.continue_task is False


def test_and_returns_the_last_when_all_pass(score):
    result = score(judge=verdict("a", 1, True) & verdict("b", 0.5, True))
    assert calls == ["a", "b"] and result.scoring.metadata == {"label": "b"}
    assert result.scoring.score == 0.5 and result.scoring.continue_task


def test_or_stops_at_the_first_pass_and_returns_it(score):
    result = score(judge=verdict("a", 0, False) | verdict("b", 0.7, True) | verdict("c", 1, True))
    assert calls == ["a", "b"]
    assert result.scoring.metadata == {"label": "b"} and result.scoring.score == 0.7


def test_or_returns_the_last_when_all_fail(score):
    result = score(judge=verdict("a", 0.1, False) | verdict("b", 0.2, False))
    assert calls == ["a", "b"]
    assert result.scoring.metadata == {"label": "b"} and not result.scoring.continue_task


def test_pass_is_judged_by_continue_task_not_score(score):
    # A score of 0 that continues counts as a pass; a score of 1 that stops, as a failure.
    result = score(judge=verdict("zero-pass", 0, True) & verdict("one-fail", 1, False))
    assert calls == ["zero-pass", "one-fail"] and result.scoring.score == 1
    calls.clear()
    result = score(judge=verdict("one-fail", 1, False) | verdict("zero-pass", 0, True))
    assert result.scoring.score == 0 and result.scoring.continue_task


def test_misbehaviour_scores_zero_and_stops(score):
    result = score(judge=AlwaysPassJudge() & CustomJudge("test_tamper"))
    assert result.status is JobStatus.SUCCEEDED
    assert result.scoring == Scoring(
        score=0.0,
        metadata={"misbehavior": "answer.txt is a symlink"},
        continue_task=False,
        cause=ZeroCause.MISBEHAVIOR,
    )


def test_custom_judge_reads_saved_submission_copies(score):
    result = score(
        judge=CustomJudge("test_files"),
        submission={"files": {"out/answer.txt": "42"}},
        submission_paths=["out/answer.txt"],
    )
    assert result.scoring.metadata["text"] == "42"
    missing = score(judge=CustomJudge("test_files"), submission_paths=["never/written.txt"])
    assert missing.scoring.metadata["text"] == "<missing>"


def test_unknown_custom_judge_fails_the_job_naming_it(score):
    result = score(judge=CustomJudge("no_such_judge"))
    assert result.status is JobStatus.FAILED and result.scoring is None
    assert "no_such_judge" in result.error
    # Where the worker looked: the modules it imported, and the rule it follows.
    assert "This worker imported" in result.error
    assert (
        "tasks.example_task.judges" in result.error
        and "tasks.python_function.checks" in result.error
    )
    assert "every module that calls register_judge or register_context" in result.error


def test_custom_judge_with_wrong_params_fails_the_job(score):
    result = score(judge=CustomJudge("test_verdict", {"nonsense": 1}))
    assert result.status is JobStatus.FAILED and "did not accept its params" in result.error


def test_a_bug_in_a_judge_fails_the_job_with_the_reason(score):
    result = score(judge=CustomJudge("test_broken"))
    assert result.status is JobStatus.FAILED
    assert "ValueError" in result.error and "bug in the judge" in result.error


def test_judges_from_task_packages_are_registered(score):
    result = score(
        transcript=say("I wrote answer.txt"),
        judge=CustomJudge("final_message_contains", {"expected": "answer.txt"}),
    )
    assert result.scoring.score == 1.0 and result.cause is None


def test_a_custom_judge_s_zero_gets_a_cause_unless_it_gave_one(score):
    result = score(
        transcript=say("I wrote nothing"),
        judge=CustomJudge("final_message_contains", {"expected": "answer.txt"}),
    )
    assert result.score == 0 and result.cause is ZeroCause.CUSTOM_ZERO
    own = score(judge=CustomJudge("test_cause", {"cause": "timeout"}))
    assert own.score == 0 and own.cause is ZeroCause.TIMEOUT


def test_rubric_against_an_unreachable_server_fails_clearly(score, monkeypatch):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("CHALK_LLM_MAX_RETRIES", "0")
    result = score(judge=RubricJudge(rubric=[{"criterion": "is polite", "weight": 1}]))
    assert result.status is JobStatus.FAILED and result.scoring is None
    assert f"the LLM server at {url} did not answer" in result.error
    assert "could not be reached" in result.error


def test_a_rubric_after_a_failing_judge_is_never_asked(score, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # would fail if asked
    judge = RegexJudge(["never said"]) & RubricJudge(rubric=[{"criterion": "is polite"}])
    result = score(transcript=say("hello"), judge=judge)
    assert result.status is JobStatus.SUCCEEDED
    assert result.scoring.metadata == {"unmatched_patterns": "never said"}


def test_every_judge_type_is_a_spec_with_an_evaluator():
    from typing import get_args

    from chalk_client.judge_specs import JudgeSpec, JudgeType
    from chalk_worker.judges.base import MODULES, evaluator_of

    specs = get_args(get_args(JudgeSpec)[0])
    kinds = sorted(get_args(JudgeType))
    assert sorted(spec.model_fields["type"].default for spec in specs) == kinds
    assert sorted(MODULES) == kinds
    assert all(callable(evaluator_of(kind)) for kind in kinds)
