"""In-process scoring at scale: ``score_job`` from many threads, ``score_jobs`` for batches.

Against the loopback chat-completions server, through the real ``openai`` client.
No timing asserts: what is checked is what makes the speed (one shared loop and
LLM pool, the in-flight cap, concurrency) and that nothing is lost or mixed up.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from support import say

from chalk_client import JobStatus, ScoringJob
from chalk_client.judges import AlwaysPassJudge, RegexJudge, RubricJudge
from chalk_worker import score_job, score_job_async, score_jobs, score_jobs_async
from chalk_worker.run.process_loop import process_loop
from chalk_worker.testing.fake_openai import FakeOpenAI


def rubric_job(number: int, criteria: int = 2) -> ScoringJob:
    """A job whose criteria are met only for even numbers, so results cannot be swapped."""
    marker = " (met)" if number % 2 == 0 else ""
    judge = RubricJudge(
        rubric=[{"criterion": f"job {number} criterion {k}{marker}"} for k in range(criteria)]
    )
    return ScoringJob(id=f"job-{number}", transcript=say(f"answer {number}"), judge=judge)


def test_a_hundred_threads_share_one_loop_and_one_llm_pool():
    with FakeOpenAI(latency_s=0.05) as fake:
        settings = fake.settings(llm_max_in_flight=16)
        jobs = [rubric_job(n) for n in range(100)]
        loops: set[int] = set()
        lock = threading.Lock()

        def run(job: ScoringJob):
            result = score_job(job, settings=settings)
            with lock:
                loops.add(id(process_loop().loop))
            return result

        with ThreadPoolExecutor(100) as threads:
            results = list(threads.map(run, jobs))
    assert [r.job_id for r in results] == [j.id for j in jobs]
    assert all(r.status is JobStatus.SUCCEEDED for r in results)
    assert [r.score for r in results] == [2.0 if n % 2 == 0 else 0.0 for n in range(100)]
    assert fake.calls == 200
    # One pool: the cap held across every thread, and connections were reused rather
    # than opened per call (a loop per call opened one client, so connections, per job).
    assert fake.max_in_flight <= 16
    assert len(fake.connections) <= 16
    assert len(loops) == 1


def test_score_jobs_returns_results_in_job_order_with_progress_in_the_calling_thread():
    with FakeOpenAI(latency_s=0.02) as fake:
        settings = fake.settings()
        jobs = [rubric_job(n, criteria=1) for n in range(30)]
        seen: list[tuple[int, int, str]] = []

        def progress(done: int, total: int) -> None:
            seen.append((done, total, threading.current_thread().name))

        results = score_jobs(jobs, settings=settings, progress=progress)
    assert [r.job_id for r in results] == [f"job-{n}" for n in range(30)]
    assert [r.score for r in results] == [1.0 if n % 2 == 0 else 0.0 for n in range(30)]
    assert [(done, total) for done, total, _ in seen] == [(n, 30) for n in range(1, 31)]
    assert {name for _, _, name in seen} == {threading.current_thread().name}


def test_score_jobs_holds_at_most_concurrency_jobs_in_flight():
    with FakeOpenAI(latency_s=0.2) as fake:
        results = score_jobs(
            [rubric_job(n, criteria=1) for n in range(12)],
            concurrency=3,
            settings=fake.settings(),
        )
    assert all(r.status is JobStatus.SUCCEEDED for r in results)
    assert fake.max_in_flight == 3


def test_the_same_id_twice_is_scored_once_and_answered_at_both_places():
    with FakeOpenAI() as fake:
        twice = rubric_job(4, criteria=1)
        results = score_jobs([twice, rubric_job(5, criteria=1), twice], settings=fake.settings())
    assert [r.job_id for r in results] == ["job-4", "job-5", "job-4"]
    assert results[0] is results[2]
    assert fake.calls == 2


def test_jobs_without_ids_get_their_own_and_keep_their_place():
    jobs = [
        ScoringJob(transcript=say("answer: 42"), judge=RegexJudge([r"answer: 42"])),
        ScoringJob(transcript=say("no"), judge=RegexJudge([r"answer: 42"])),
    ]
    results = score_jobs(jobs)
    assert [r.score for r in results] == [1.0, 0.0]
    assert results[0].job_id != results[1].job_id


def test_score_jobs_async_runs_in_the_caller_s_loop():
    async def main():
        return await score_jobs_async([ScoringJob(judge=AlwaysPassJudge()) for _ in range(5)])

    assert [r.score for r in asyncio.run(main())] == [1.0] * 5


def test_score_jobs_of_nothing_is_an_empty_list():
    assert score_jobs([]) == []


def test_score_jobs_refuses_a_concurrency_below_one():
    with pytest.raises(ValueError, match="at least 1"):
        score_jobs([ScoringJob(judge=AlwaysPassJudge())], concurrency=0)


def test_cancelling_a_batch_cancels_the_jobs_in_flight():
    with FakeOpenAI(latency_s=60.0) as fake:
        settings = fake.settings(rubric_deadline_s=120)

        async def main() -> float:
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(
                    score_jobs_async([rubric_job(n) for n in range(4)], settings=settings), 0.3
                )
            return time.monotonic() - started

        elapsed = asyncio.run(main())
    assert elapsed < 30  # the 60 s replies were not waited for


def test_a_failing_progress_callback_stops_the_batch_and_raises():
    def progress(done: int, total: int) -> None:
        raise RuntimeError("progress bar broke")

    with pytest.raises(RuntimeError, match="progress bar broke"):
        score_jobs([ScoringJob(judge=AlwaysPassJudge()) for _ in range(3)], progress=progress)


def test_score_job_called_on_the_shared_loop_s_own_thread_does_not_deadlock():
    async def on_the_loop():
        # Blocking here holds the loop: score_job must use a loop of its own.
        return score_job(ScoringJob(judge=AlwaysPassJudge()))

    result = process_loop().run(on_the_loop())
    assert result.status is JobStatus.SUCCEEDED and result.score == 1.0


def test_score_job_async_and_score_job_agree():
    job = ScoringJob(id="same", transcript=say("answer: 7"), judge=RegexJudge([r"answer: \d"]))
    assert asyncio.run(score_job_async(job)).score == score_job(job).score == 1.0


def test_settings_read_from_the_environment_follow_its_changes(monkeypatch):
    from chalk_client.judges import ExecutableJudge
    from chalk_worker.run.runner import default_settings

    job = ScoringJob(judge=ExecutableJudge(["{python}", "-c", "pass", "out.json"]))
    assert "not allowed" not in (score_job(job).error or "")
    first = default_settings()
    assert default_settings() is first  # read once while nothing changes
    monkeypatch.setenv("CHALK_ALLOWED_COMMANDS", "{python} -m tasks.")
    refused = score_job(job)
    assert refused.status is JobStatus.FAILED and "allow" in refused.error
    assert default_settings() is not first
