"""The rubric judge through ``score_job``, the real ``openai`` client and a loopback server."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from support import say

from chalk_client import ChalkSettings, JobResult, JobStatus, Scoring, ScoringJob, Step, Transcript
from chalk_client.judges import CustomJudge, Judge, RubricJudge, register_judge
from chalk_client.scoring import ZeroCause
from chalk_worker import score_job, score_job_async
from chalk_worker.llm.client import close_llm_clients
from chalk_worker.llm.verdicts import parse_verdict
from chalk_worker.testing.fake_openai import FakeOpenAI, Reply
from chalk_worker.testing.fake_openai import settings_for as fake_settings


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def settings_for(server: FakeOpenAI | str, **overrides: Any) -> ChalkSettings:
    """Settings pointing at ``server`` (a fake or a URL), with no verdict cache."""
    return fake_settings(server if isinstance(server, str) else server.url, **overrides)


def rubric(*criteria: str | tuple[str, float], **fields: Any) -> RubricJudge:
    items = [c if isinstance(c, tuple) else (c, 1.0) for c in criteria]
    return RubricJudge(rubric=[{"criterion": c, "weight": w} for c, w in items], **fields)


def grade(settings: ChalkSettings, judge: RubricJudge, text: str = "the answer is 42") -> JobResult:
    return score_job(ScoringJob(transcript=say(text), judge=judge), settings=settings)


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_score_sums_the_weights_of_the_criteria_met(fake):
    judge = rubric(("names the cause (met)", 0.5), ("proposes a fix", 0.3), ("is short (met)", 0.2))
    result = grade(settings_for(fake), judge)
    assert result.status is JobStatus.SUCCEEDED
    assert result.score == pytest.approx(0.7)
    assert result.scoring.continue_task
    assert result.cause is None


def test_a_rubric_that_meets_nothing_is_a_zero_of_unmet_criteria(fake):
    result = grade(settings_for(fake), rubric("names the cause", "proposes a fix"))
    assert result.status is JobStatus.SUCCEEDED and result.score == 0
    assert result.cause is ZeroCause.UNMET_CRITERIA and not result.grader_error


def test_one_call_per_criterion_each_prompt_holding_only_its_own_criterion(fake):
    criteria = [f"criterion number {n} (met)" for n in range(1, 6)]
    grade(settings_for(fake), rubric(*criteria), text="unique answer text")
    assert fake.calls == len(criteria)
    for seen in fake.requests:
        prompt = seen.prompt
        assert sum(criterion in prompt for criterion in criteria) == 1
        assert "unique answer text" in prompt
    asked = sorted(next(c for c in criteria if c in seen.prompt) for seen in fake.requests)
    assert asked == sorted(criteria)


def test_each_verdict_and_reason_is_in_the_metadata(fake):
    result = grade(settings_for(fake), rubric("first (met)", "second"))
    metadata = result.scoring.metadata
    assert metadata["criterion_1"] == "YES: it is there"
    assert metadata["criterion_1_text"] == "first (met)"
    assert metadata["criterion_2"] == "NO: it is not there"
    assert metadata["criterion_2_text"] == "second"
    assert metadata["rubric_model"] == "gpt-4o-mini"
    assert metadata["rubric_calls"] == "2"
    assert metadata["rubric_cached"] == "0"
    assert metadata["rubric_prompt_tokens"] == "200"
    assert metadata["rubric_completion_tokens"] == "20"
    assert metadata["criterion_2_prompt_tokens"] == "100"
    assert metadata["criterion_2_completion_tokens"] == "10"


def test_the_model_comes_from_the_judge_or_the_setting(fake):
    grade(settings_for(fake, rubric_model="house-model"), rubric("a"))
    grade(settings_for(fake), rubric("b", model="judge-model"))
    assert [seen.body["model"] for seen in fake.requests] == ["house-model", "judge-model"]


def test_continue_threshold_decides_whether_the_task_goes_on(fake):
    judge = rubric(("met (met)", 0.5), "missed", continue_threshold=1.0)
    result = grade(settings_for(fake), judge)
    assert result.score == 0.5 and not result.scoring.continue_task
    assert grade(settings_for(fake), rubric("missed")).scoring.continue_task


def test_structured_output_is_asked_for_first(fake):
    grade(settings_for(fake), rubric("a (met)"))
    (seen,) = fake.requests
    assert seen.body["response_format"]["type"] == "json_schema"
    assert seen.body["temperature"] == 0


def test_a_server_without_structured_output_gets_plain_text_and_is_remembered():
    with FakeOpenAI(structured=False) as server:
        result = grade(settings_for(server), rubric("a (met)", "b"))
        assert result.score == 1.0
        assert result.scoring.metadata["criterion_2"] == "NO: it is not there"
        first_job = list(server.requests)
        assert sorted(seen.structured for seen in first_job) == [False, False, True, True]
        grade(settings_for(server), rubric("c (met)"))
        assert [seen.structured for seen in server.requests[len(first_job) :]] == [False]


def test_429_is_retried_after_the_servers_retry_after(fake):
    fake.fail_next(Reply(status=429, headers={"retry-after": "1"}))
    result = grade(settings_for(fake), rubric("a (met)"))
    assert result.score == 1.0
    assert fake.statuses == [429, 200]
    gap = fake.requests[1].started - fake.requests[0].started
    assert gap >= 0.95  # the client's own first backoff is at most 0.5 s


def test_5xx_are_retried_with_backoff(fake):
    fake.fail_next(Reply(status=500), Reply(status=503))
    result = grade(settings_for(fake), rubric("a (met)"))
    assert result.score == 1.0
    assert fake.statuses == [500, 503, 200]


def test_a_timed_out_attempt_is_retried(fake):
    fake.fail_next(Reply(delay_s=3.0))
    started = time.monotonic()
    result = grade(settings_for(fake, llm_request_timeout_s=0.5), rubric("a (met)"))
    assert result.score == 1.0
    assert fake.calls == 2 and time.monotonic() - started < 2.5


def test_5xx_after_every_retry_fails_the_job_with_the_reason(fake):
    fake.answer = lambda seen: Reply(status=502)
    result = grade(settings_for(fake, llm_max_retries=1), rubric("a (met)"))
    assert result.status is JobStatus.FAILED
    assert "HTTP 502" in result.error and fake.url in result.error
    assert fake.calls == 2


def test_an_unreachable_server_fails_the_job_with_the_reason():
    url = closed_port_url()
    result = grade(settings_for(url, llm_max_retries=1), rubric("a"))
    assert result.status is JobStatus.FAILED
    assert "could not be reached" in result.error and url in result.error
    # Whose settings these are: the scoring process's, not the client's.
    assert "are read by the process that scores the job" in result.error
    assert "set them where the workers run" in result.error and "chalk health" in result.error


def test_an_unreachable_server_fails_within_the_deadline():
    settings = settings_for(closed_port_url(), llm_max_retries=50, rubric_deadline_s=1.5)
    started = time.monotonic()
    result = grade(settings, rubric("a", "b"))
    elapsed = time.monotonic() - started
    assert result.status is JobStatus.FAILED
    assert "deadline of 1.5 s" in result.error and "criteria 1, 2" in result.error
    assert 1.4 <= elapsed < 3.0


def test_a_server_that_never_answers_fails_at_the_deadline():
    with FakeOpenAI(latency_s=10) as server:
        started = time.monotonic()
        result = grade(settings_for(server, rubric_deadline_s=1.0), rubric("a"))
        assert result.status is JobStatus.FAILED and "deadline" in result.error
        assert time.monotonic() - started < 2.5


def test_the_deadline_message_names_the_last_http_error(fake):
    fake.answer = lambda seen: Reply(status=429, headers={"retry-after": "5"})
    result = grade(settings_for(fake, llm_max_retries=5, rubric_deadline_s=1.0), rubric("a"))
    assert result.status is JobStatus.FAILED
    assert "HTTP 429 (Retry-After: 5)" in result.error


def test_a_non_verdict_is_asked_again_with_a_follow_up(fake):
    fake.fail_next(Reply(content="Let me think about it."))
    result = grade(settings_for(fake), rubric("a (met)"))
    assert result.score == 1.0
    assert fake.calls == 2
    follow_up = fake.requests[1].body["messages"]
    assert follow_up[-2] == {"role": "assistant", "content": "Let me think about it."}
    assert "not a verdict" in follow_up[-1]["content"]
    assert result.scoring.metadata["criterion_1_prompt_tokens"] == "200"  # both replies


def test_a_criterion_without_a_verdict_fails_the_job_naming_it(fake):
    fake.answer = lambda seen: Reply(content="Maybe." if "second" in seen.prompt else None)
    result = grade(settings_for(fake), rubric("first (met)", "second (met)"))
    assert result.status is JobStatus.FAILED
    assert "criterion 2 ('second (met)')" in result.error and "Maybe." in result.error
    assert "CHALK_RUBRIC_NO_VERDICT=unscored" in result.error
    assert sum("second" in seen.prompt for seen in fake.requests) == 2  # asked, then asked again


GARBAGE = [
    Reply(content="Maybe"),
    Reply(content="YESterday I would have said so"),
    Reply(content="No idea, sorry"),
    Reply(content='{"verdict": "PROBABLY", "reason": "hm"}'),
    Reply(content=""),
    Reply(body=b"this is not JSON"),
    Reply(body=b'{"choices": []}'),
    Reply(body=b'{"choices": "YES"}'),
    Reply(body=b'{"choices": [{"message": {"content": null, "refusal": "I will not grade"}}]}'),
]


@pytest.mark.parametrize("garbage", GARBAGE, ids=lambda r: repr(r.content or r.body)[:30])
def test_garbage_is_never_a_yes_nor_silently_a_no(fake, garbage):
    fake.answer = lambda seen: garbage
    settings = settings_for(fake, rubric_no_verdict="unscored")
    result = grade(settings, rubric(("met (met)", 1.0), ("garbage (met)", 2.0)))
    assert result.status is JobStatus.SUCCEEDED
    metadata = result.scoring.metadata
    assert result.score == 0.0
    assert metadata["criterion_1"].startswith("UNSCORED: no YES/NO verdict in 2 replies")
    assert metadata["unscored_criteria"] == "1, 2"
    assert grade(settings_for(fake), rubric("a (met)")).status is JobStatus.FAILED


def test_unscored_criteria_score_nothing_and_the_others_count(fake):
    fake.answer = lambda seen: Reply(content="unsure") if "vague" in seen.prompt else None
    settings = settings_for(fake, rubric_no_verdict="unscored")
    result = grade(settings, rubric(("clear (met)", 0.5), ("vague (met)", 0.5)))
    assert result.score == 0.5
    assert result.scoring.metadata["unscored_criteria"] == "2"
    assert result.scoring.metadata["criterion_2"].startswith("UNSCORED")


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("YES", (True, "")),
        ("NO: the cause is not named.", (False, "the cause is not named.")),
        ("**YES** - it does", (True, "it does")),
        ("no.", (False, "")),
        ('```json\n{"reason": "r", "verdict": "NO"}\n```', (False, "r")),
        ("NO\nthe fix is missing", (False, "the fix is missing")),
        ("No idea", None),
        ("Not really", None),
        ("YES or NO?", None),
        ("I'd say YES", None),
        ('{"verdict": true}', None),
        (None, None),
    ],
)
def test_only_an_explicit_yes_or_no_is_a_verdict(reply, expected):
    assert parse_verdict(reply) == expected


def test_the_in_flight_cap_holds_across_jobs_and_criteria():
    with FakeOpenAI(latency_s=0.05) as server:
        settings = settings_for(server, llm_max_in_flight=6)
        jobs = [
            ScoringJob(
                transcript=say(f"answer {n}"), judge=rubric(*(f"c{k} (met)" for k in range(5)))
            )
            for n in range(8)
        ]

        async def run_all() -> list[JobResult]:
            try:
                return await asyncio.gather(*(score_job_async(j, settings=settings) for j in jobs))
            finally:
                await close_llm_clients()

        results = asyncio.run(run_all())
        assert all(result.score == 5.0 for result in results)
        assert server.calls == 40 and server.max_in_flight == 6


def test_the_cap_holds_for_every_event_loop_of_the_process():
    with FakeOpenAI(latency_s=0.1) as server:
        settings = settings_for(server, llm_max_in_flight=3)
        results: list[JobResult] = []

        def one_job(n: int) -> None:
            judge = rubric(*(f"thread {n} criterion {k} (met)" for k in range(4)))
            results.append(grade(settings, judge))

        threads = [threading.Thread(target=one_job, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [result.score for result in results] == [4.0] * 4
        assert server.max_in_flight == 3


def test_criteria_and_jobs_are_graded_concurrently():
    with FakeOpenAI(latency_s=0.2) as server:
        settings = settings_for(server)
        jobs = [
            ScoringJob(
                transcript=say(f"answer {n}"), judge=rubric(*(f"c{k} (met)" for k in range(5)))
            )
            for n in range(20)
        ]

        async def run_all() -> list[JobResult]:
            try:
                return await asyncio.gather(*(score_job_async(j, settings=settings) for j in jobs))
            finally:
                await close_llm_clients()

        started = time.monotonic()
        results = asyncio.run(run_all())
        elapsed = time.monotonic() - started
        assert all(result.score == 5.0 for result in results)
        assert server.max_in_flight >= 50
        assert elapsed < 2.0  # one call after another: 100 x 0.2 s = 20 s


def test_connections_are_reused_within_a_worker_loop(fake):
    settings = settings_for(fake)

    async def one_after_another() -> None:
        try:
            for n in range(5):
                await score_job_async(
                    ScoringJob(transcript=say(f"x{n}"), judge=rubric("a")), settings=settings
                )
        finally:
            await close_llm_clients()

    asyncio.run(one_after_another())
    assert fake.calls == 5 and len(fake.connections) == 1


def test_a_remembered_verdict_costs_no_call(fake):
    settings = settings_for(fake, rubric_cache_entries=100)
    judge = rubric(("cached criterion (met)", 1.0), ("other cached criterion", 1.0))
    text = f"cache test {time.time_ns()}"
    first = grade(settings, judge, text)
    second = grade(settings, judge, text)
    assert fake.calls == 2
    assert second.scoring.score == first.scoring.score == 1.0
    assert second.scoring.metadata["criterion_1"] == "YES: it is there"
    assert second.scoring.metadata["rubric_calls"] == "0"
    assert second.scoring.metadata["rubric_cached"] == "2"
    assert second.scoring.metadata["rubric_prompt_tokens"] == "0"
    grade(settings, judge, text + " changed")
    assert fake.calls == 4


def test_no_api_key_and_no_server_fails_clearly(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    result = grade(ChalkSettings(), rubric("a"))
    assert result.status is JobStatus.FAILED and "OPENAI_API_KEY" in result.error


def test_the_server_is_read_from_openai_base_url(fake, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    result = grade(ChalkSettings(rubric_cache_entries=0), rubric("a (met)"))
    assert result.score == 1.0 and fake.calls == 1


@register_judge("test_slow_pass")
class SlowPass(Judge):
    """Passes after ``seconds``: a long scoring step before a rubric."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def evaluate(self, transcript: Transcript) -> Scoring:
        time.sleep(self.seconds)
        return Scoring(score=1.0)


def test_the_deadline_counts_only_time_spent_grading_with_the_llm():
    with FakeOpenAI(latency_s=0.2) as server:
        job = ScoringJob(
            transcript=say("x"),
            steps=[Step(CustomJudge("test_slow_pass", {"seconds": 1.2})), Step(rubric("a (met)"))],
        )
        result = score_job(job, settings=settings_for(server, rubric_deadline_s=1.0))
        assert result.status is JobStatus.SUCCEEDED and result.score == 1.0


def test_the_deadline_is_shared_by_the_rubric_steps_of_a_job():
    with FakeOpenAI(latency_s=0.6) as server:
        job = ScoringJob(transcript=say("x"), steps=[Step(rubric("a")), Step(rubric("b"))])
        result = score_job(job, settings=settings_for(server, rubric_deadline_s=1.0))
        assert result.status is JobStatus.FAILED and "deadline of 1 s" in result.error
        assert server.calls == 2


@pytest.mark.parametrize(
    "context",
    [
        "plain",
        'quotes " and \\ slashes',
        "tabs\t\nnewlines\x00\x1f\x7f",
        "naïve ✓ 中文 \u2028 🙂",
        "",
    ],
)
def test_a_verdict_s_cache_key_is_the_one_earlier_workers_computed(context: str) -> None:
    # Workers of several versions share the cluster's verdict cache: the key's text is
    # the standard library's JSON of its parts, however it is written now.
    import hashlib
    import json

    from chalk_worker.llm.verdict_cache import verdict_key

    parts = ["v1", "http://llm:8000/v1", "model-a", "criterion ✓", context]
    expected = hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode()).hexdigest()
    assert (
        verdict_key(
            prompt_version=parts[0],
            server=parts[1],
            model=parts[2],
            criterion=parts[3],
            context=context,
        )
        == expected
    )
