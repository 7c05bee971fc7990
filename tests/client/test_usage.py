"""LLM tokens per job and batch, and their cost where a price is configured."""

from __future__ import annotations

from chalk_client import ChalkSettings, JobResult, JobStatus, Scoring
from chalk_client.summary import summarize
from chalk_client.usage import TokenUsage, format_cost


def rubric_step(prompt: int, completion: int, score: float = 1.0) -> Scoring:
    metadata = {"rubric_prompt_tokens": str(prompt), "rubric_completion_tokens": str(completion)}
    return Scoring(score=score, metadata=metadata)


def result(job_id: str, *steps: Scoring) -> JobResult:
    return JobResult(
        job_id=job_id, status=JobStatus.SUCCEEDED, scoring=steps[-1], steps=list(steps)
    )


PRICED = ChalkSettings(llm_prompt_price_per_mtok=0.15, llm_completion_price_per_mtok=0.6)


def test_a_jobs_tokens_sum_its_steps_and_judges_without_an_llm_count_nothing():
    job = result("a", rubric_step(300, 30), Scoring(score=1.0), rubric_step(200, 20))
    assert TokenUsage.of_result(job) == TokenUsage(prompt=500, completion=50)
    assert TokenUsage.of_result(result("b", Scoring(score=1.0, metadata={"x": "1"}))).total == 0


def test_the_batch_summary_sums_tokens_and_costs_them_only_at_configured_prices():
    results = [result("a", rubric_step(1_000_000, 100_000)), result("b", rubric_step(500, 50))]
    ids = ["a", "b"]
    unpriced = summarize(ids, results, [], settings=ChalkSettings())
    assert unpriced.tokens == TokenUsage(prompt=1_000_500, completion=100_050)
    assert unpriced.cost is None
    assert "  LLM: 1,000,500 prompt + 100,050 completion tokens" in unpriced.render()
    assert "est." not in unpriced.render()
    priced = summarize(ids, results, [], settings=PRICED)
    assert priced.cost == (1_000_500 * 0.15 + 100_050 * 0.6) / 1e6
    assert priced.render().splitlines()[3] == (
        "  LLM: 1,000,500 prompt + 100,050 completion tokens, est. $0.2101"
    )


def test_one_price_is_enough_and_a_batch_without_llm_shows_no_token_line():
    prompt_only = ChalkSettings(llm_prompt_price_per_mtok=2.0)
    assert TokenUsage(prompt=2_000_000, completion=5).cost(prompt_only) == 4.0
    plain = summarize(["a"], [result("a", Scoring(score=1.0))], [], settings=PRICED)
    assert "LLM" not in plain.render()


def test_costs_read_well_large_and_small():
    assert format_cost(1234.567) == "$1,234.57"
    assert format_cost(0.00042) == "$0.0004"
