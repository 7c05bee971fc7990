"""The worker's own Prometheus metrics, scraped from a real ``chalk worker``.

The worker (``CHALK_METRICS_PORT`` set) scores a regex job, a job whose custom
judge does not exist (``failed``), a scoring script that times out in the
sandbox, and the same rubric twice against the loopback chat-completions server,
whose first reply is an HTTP 500 (one retry); the second rubric is answered
from the verdict cache. Every count is then read back from ``/metrics``.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest
from processes import free_port, wait_port
from prometheus_client.parser import text_string_to_metric_families
from support import say

from chalk_client import ChalkClient, JobStatus, ScoringJob
from chalk_client.judges import (
    CustomJudge,
    ExecutableJudge,
    RegexJudge,
    RubricJudge,
    TranscriptContext,
)
from chalk_worker.testing.fake_openai import FakeOpenAI, Reply

RUBRIC = RubricJudge(
    rubric=[
        {"criterion": "names the cause (met)", "weight": 0.5},
        {"criterion": "proposes a fix", "weight": 0.5},
    ],
    context=[TranscriptContext()],
    model="fake-model",
)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.mark.slow
def test_the_worker_exports_its_own_metrics(ops_redis, start_worker, fake):
    port = free_port()
    start_worker(
        ops_redis.url,
        concurrency=4,
        env={
            "CHALK_METRICS_PORT": str(port),
            "CHALK_LLM_BASE_URL": fake.url,
            "CHALK_LLM_API_KEY": "test-key",
            "CHALK_LLM_MAX_RETRIES": "2",
        },
    )
    assert wait_port(port)
    fake.fail_next(Reply(status=500))
    client = ChalkClient(ops_redis.url)
    sleeper = ["{python}", "-c", "import time; time.sleep(60)", "out.txt"]
    first = [
        ScoringJob(id="regex", transcript=say("answer: 42"), judge=RegexJudge([r"answer: 42"])),
        ScoringJob(id="broken", judge=CustomJudge("no_such_judge", {})),
        ScoringJob(id="slow", judge=ExecutableJudge(sleeper, timeout_s=1)),
        ScoringJob(id="rubric-1", transcript=say("a report"), judge=RUBRIC),
    ]
    batch = client.submit_batch(first, priority="high")
    results = {r.job_id: r for r in batch.results(timeout=60)}
    assert results["broken"].status is JobStatus.FAILED
    assert "timed out" in results["slow"].scoring.metadata["error"]
    again = client.submit_and_wait(
        ScoringJob(id="rubric-2", transcript=say("a report"), judge=RUBRIC), timeout=30
    )
    assert again.score == 0.5
    assert fake.calls == 3  # two criteria, one retried; the second rubric asked nothing

    metrics = scrape(port)

    def value(name: str, **labels: str) -> float:
        return metrics.get((name, tuple(sorted(labels.items()))), 0.0)

    assert value("chalk_jobs_total", status="succeeded") == 4
    assert value("chalk_jobs_total", status="failed") == 1
    assert value("chalk_messages_total", outcome="succeeded") == 4
    assert value("chalk_messages_total", outcome="failed") == 1
    assert value("chalk_messages_in_progress") == 0
    assert value("chalk_jobs_started_total", priority="high") == 4
    assert value("chalk_jobs_started_total", priority="normal") == 1
    assert value("chalk_job_duration_seconds_count") == 5
    for judge, count in (("regex", 1), ("custom", 1), ("executable", 1), ("rubric", 2)):
        assert value("chalk_judge_duration_seconds_count", judge=judge) == count, judge
    assert value("chalk_judge_duration_seconds_sum", judge="executable") >= 1.0
    assert value("chalk_sandbox_runs_total", outcome="timeout") == 1
    assert value("chalk_sandbox_timeouts_total") == 1
    assert value("chalk_sandbox_kills_total", reason="timeout") == 1
    assert value("chalk_llm_requests_total") == 3
    assert value("chalk_llm_retries_total") == 1
    assert value("chalk_llm_responses_total", code="500") == 1
    assert value("chalk_llm_responses_total", code="200") == 2
    assert value("chalk_rubric_verdicts_total", source="llm") == 2
    assert value("chalk_rubric_verdicts_total", source="cache") == 2
    assert value("chalk_llm_tokens_total", kind="prompt", model="fake-model") == 200
    assert value("chalk_llm_tokens_total", kind="completion", model="fake-model") == 20
    assert value("chalk_job_retries_total") == 0


PREFORK = """
import os, sys, urllib.request
os.environ["PROMETHEUS_MULTIPROC_DIR"] = sys.argv[1]
from chalk_client import JobResult, JobStatus
from chalk_worker import metrics

for _ in range(3):  # prefork children, each counting one job
    pid = os.fork()
    if pid == 0:
        metrics.job_scored(JobResult(job_id="j", status=JobStatus.SUCCEEDED, timings={"total": 1}))
        os._exit(0)
    os.waitpid(pid, 0)
    metrics.process_exited(pid)
assert metrics.serve(int(sys.argv[2]), address="127.0.0.1")
print(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[2]}/metrics").read().decode())
"""


def test_with_prefork_the_parent_serves_every_child_s_counts(tmp_path):
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-c", PREFORK, str(tmp_path), str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    families = {f.name: f for f in text_string_to_metric_families(run.stdout)}
    jobs = {tuple(s.labels.items()): s.value for s in families["chalk_jobs"].samples}
    assert jobs[(("status", "succeeded"),)] == 3


def test_score_job_alone_records_no_metrics_and_imports_no_prometheus():
    # The judges count through hooks the worker installs at start; a trainer calling
    # score_job (or chalk score) pays for none of it.
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from chalk_client import ScoringJob\n"
        "from chalk_client.judges import RegexJudge\n"
        "from chalk_worker import score_job\n"
        "from chalk_worker.judges.hooks import HOOKS\n"
        "assert score_job(ScoringJob(judge=RegexJudge(['x']))).status == 'succeeded'\n"
        "assert HOOKS.sandbox_run.__name__ == '_ignored'\n"
        "print('prometheus_client' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
