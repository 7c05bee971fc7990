"""Rubric grading shared by a cluster: the verdict cache and request pace in Redis, tokens.

Real ``chalk worker`` processes and forked scoring processes talk to a real
redis-server and to the loopback chat-completions server through the real
``openai`` client; calls are counted, and their start times measured, at that server.
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from processes import free_port, start_redis, stop
from support import say

from chalk_client import ChalkClient, ChalkSettings, JobStatus, ScoringJob
from chalk_client.judges import RubricJudge
from chalk_client.usage import TokenUsage
from chalk_worker import score_job
from chalk_worker.llm import loop_redis
from chalk_worker.testing.fake_openai import FakeOpenAI, Reply

ROOT = Path(__file__).resolve().parents[3]
JUDGE = RubricJudge(
    rubric=[
        {"criterion": "names the cause (met)", "weight": 0.5},
        {"criterion": "proposes a fix", "weight": 0.3},
        {"criterion": "is short (met)", "weight": 0.2},
    ]
)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def chalk_status(redis_url: str, target: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CHALK_")}
    run = subprocess.run(
        [sys.executable, "-m", "chalk_client.cli", "status", target],
        capture_output=True,
        text=True,
        env={**clean, "CHALK_REDIS_URL": redis_url, **env},
        cwd=ROOT,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_a_verdict_one_worker_paid_for_costs_the_next_worker_no_call(
    own_redis_url, start_worker, fake
):
    env = {
        "OPENAI_BASE_URL": fake.url,
        "OPENAI_API_KEY": "test-key",
        "CHALK_RUBRIC_CACHE_ENTRIES": "0",  # only Redis can remember
    }
    # Two workers on queues of their own, so each batch goes to the worker chosen for it.
    first = start_worker(own_redis_url, env={**env, "CHALK_QUEUE": "first"}, wait=False)
    second = start_worker(own_redis_url, env={**env, "CHALK_QUEUE": "second"}, wait=False)
    first.wait_for(" ready.")
    second.wait_for(" ready.")

    def jobs(tag: str) -> list[ScoringJob]:
        return [
            ScoringJob(id=f"{tag}-{n}", transcript=say(f"answer {n}"), judge=JUDGE)
            for n in range(4)
        ]

    with ChalkClient(own_redis_url, settings=ChalkSettings(queue="first")) as client:
        paid = client.submit_batch(jobs("paid"))
        paid_results = paid.results(timeout=60)
        paid_summary = paid.summary()
    assert fake.calls == 12
    assert all(r.worker.startswith(first.name + "@") for r in paid_results)
    assert all(r.scoring.metadata["rubric_cached"] == "0" for r in paid_results)
    assert paid_summary.tokens == TokenUsage(prompt=12 * 100, completion=12 * 10)
    assert paid_summary.cost is None  # no price configured
    assert "LLM: 1,200 prompt + 120 completion tokens" in paid_summary.render()
    assert "est." not in paid_summary.render()

    with ChalkClient(own_redis_url, settings=ChalkSettings(queue="second")) as client:
        free = client.submit_batch(jobs("free"))
        free_results = free.results(timeout=60)
        free_summary = free.summary()
    assert fake.calls == 12  # not one more call
    assert all(r.worker.startswith(second.name + "@") for r in free_results)
    assert [r.score for r in free_results] == [r.score for r in paid_results] == [0.7] * 4
    assert free_results[0].scoring.metadata["criterion_1"] == "YES: it is there"
    for result in free_results:
        metadata = result.scoring.metadata
        assert (metadata["rubric_calls"], metadata["rubric_cached"]) == ("0", "3")
        assert metadata["criterion_2_prompt_tokens"] == "0"
    assert free_summary.tokens == TokenUsage() and "LLM:" not in free_summary.render()

    store = redis.Redis.from_url(own_redis_url)
    remembered = store.keys("chalk:verdict:*")
    assert len(remembered) == 12
    week = ChalkSettings().rubric_cache_ttl_s
    assert week - 60 < store.ttl(remembered[0]) <= week

    priced = chalk_status(
        own_redis_url,
        paid.id,
        CHALK_LLM_PROMPT_PRICE_PER_MTOK="2.5",
        CHALK_LLM_COMPLETION_PRICE_PER_MTOK="10",
    )
    # 1,200 x 2.5 / 1M + 120 x 10 / 1M = 0.0042
    assert "  LLM: 1,200 prompt + 120 completion tokens, est. $0.0042" in priced
    job = chalk_status(own_redis_url, "paid-0")
    assert "  LLM: 300 prompt + 30 completion tokens\n" in job


@pytest.fixture
def private_redis(redis_server, tmp_path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A redis-server of this test's own, to stop and break; yields its URL and process.

    (``redis_server`` skips the test where there is no redis-server, or fails it under CI.)
    """
    port = free_port()
    proc = start_redis(port, tmp_path)
    yield f"redis://127.0.0.1:{port}/0", proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
    stop(proc)


def test_redis_trouble_never_fails_grading_it_costs_calls(private_redis, fake, monkeypatch, caplog):
    url, proc = private_redis
    monkeypatch.setattr(loop_redis, "TIMEOUT_S", 0.5)
    monkeypatch.setattr(loop_redis, "OUTAGE_PAUSE_S", 0.5)
    settings = fake.settings(
        redis_url=url, rubric_cache_entries=0, llm_cluster_requests_per_minute=60_000
    )
    job = ScoringJob(transcript=say("the answer"), judge=JUDGE)

    def grade() -> float:
        result = score_job(job, settings=settings)
        assert result.status is JobStatus.SUCCEEDED and result.score == 0.7, result.error
        return float(result.scoring.metadata["rubric_calls"])

    assert (grade(), grade()) == (3, 0)  # the second from Redis
    caplog.set_level(logging.WARNING, logger="chalk_worker.llm.loop_redis")

    proc.send_signal(signal.SIGSTOP)  # a Redis that accepts and never answers
    started = time.monotonic()
    assert grade() == 3
    assert time.monotonic() - started < 2.0  # one short timeout, then Redis is left alone
    assert "cannot reach Redis at " + url in caplog.text
    assert caplog.text.count("cannot reach Redis") == 1  # said once per outage

    proc.send_signal(signal.SIGCONT)
    time.sleep(0.6)
    assert grade() == 0  # remembered all along
    assert "is reachable again" in caplog.text

    stop(proc, signal.SIGKILL)  # gone: connections refused
    assert grade() == 3
    assert fake.calls == 9


def test_the_cluster_rate_holds_across_processes_retries_included(own_redis_url, fake):
    per_minute = 600  # one request every 100 ms, both processes together
    settings = fake.settings(
        redis_url=own_redis_url, llm_cluster_requests_per_minute=per_minute, rubric_cache_ttl_s=0
    )
    fake.fail_next(Reply(status=500))  # its retry is paced too
    judge = RubricJudge(rubric=[{"criterion": f"criterion {k} (met)"} for k in range(5)])
    children = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:  # a process of its own, as each worker is
            try:
                job = ScoringJob(transcript=say(f"from process {os.getpid()}"), judge=judge)
                os._exit(0 if score_job(job, settings=settings).score == 5.0 else 1)
            except BaseException:
                os._exit(2)
        children.append(pid)
    for pid in children:
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    assert len(fake.requests) == 11 and fake.statuses.count(500) == 1
    for pid in children:
        assert sum(f"from process {pid}" in seen.prompt for seen in fake.requests) >= 5
    starts = sorted(seen.started for seen in fake.requests)
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    # 100 ms apart on Redis's clock; a start the machine's load delayed may come closer
    # to the next, never as close as two processes pacing themselves alone (~0 ms).
    assert min(gaps) >= 0.05, gaps
    for first, start in enumerate(starts):
        in_window = [later for later in starts[first:] if later - start < 0.5]
        assert len(in_window) <= 6, gaps  # 0.5 s holds 5 starts, 6 at its edges
