"""``chalk health``, ``chalk status BATCH`` (its ETA), ``chalk purge``, ``chalk retry --failed``.

Driven as an operator would, from a shell, against a redis-server and real
``chalk worker`` processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from support import held_count

from chalk_client import ChalkClient, JobStatus, ScoringJob
from chalk_client.cli.eta import BatchProgress
from chalk_client.cli.purge import PURGED_ERROR
from chalk_client.judges import AlwaysPassJudge, CustomJudge

ROOT = Path(__file__).resolve().parents[2]


def chalk(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHALK_")}
    return subprocess.run(
        [sys.executable, "-m", "chalk_client.cli", *args],
        capture_output=True,
        text=True,
        env={**env, "CHALK_REDIS_URL": redis_url},
        cwd=ROOT,
        timeout=120,
    )


def passing(prefix: str, count: int) -> list[ScoringJob]:
    return [ScoringJob(id=f"{prefix}-{i}", judge=AlwaysPassJudge()) for i in range(count)]


@pytest.mark.slow
def test_health_reports_redis_the_queue_and_each_worker_with_its_sandbox(make_redis, start_worker):
    server = make_redis(aof=True)
    alone = chalk(server.url, "health")
    assert alone.returncode == 1, alone.stderr
    assert "workers: 0 alive" in alone.stdout and "PROBLEM: no live worker" in alone.stdout
    assert "maxmemory-policy noeviction" in alone.stdout
    assert "AOF on (appendfsync everysec)" in alone.stdout

    llm = {
        "OPENAI_BASE_URL": "http://vllm.internal:8000/v1",
        "OPENAI_API_KEY": "sk-never-shown-1234",
        "CHALK_RUBRIC_MODEL": "Qwen/Qwen2.5-7B-Instruct",
    }
    worker = start_worker(server.url, concurrency=3, env=llm)
    ChalkClient(server.url).submit(ScoringJob(id="waiting", judge=AlwaysPassJudge()))
    report = chalk(server.url, "health")
    assert report.returncode == 0, report.stdout + report.stderr
    out = report.stdout
    assert f"cluster at {server.url}" in out and "Redis 7" in out
    assert "queue chalk: 0 waiting, 0 delivered" in out
    assert "workers: 1 alive" in out and f"    {worker.name}@" in out
    assert "threads x3" in out
    assert "sandbox layer rlimits: on" in out  # the worker's own probe, one line per layer
    layers = [line for line in out.splitlines() if line.startswith("      sandbox layer ")]
    assert len(layers) == 7
    assert "      warm python: on (" in out  # with root and bubblewrap, as here and in CI
    # The tests judge's languages: .ci/run installs every toolchain.
    assert "      tests judge: python, c, cpp, java, go, rust, javascript, bash\n" in out
    assert "cannot run" not in out
    # The worker's own LLM settings (the client's do not count), never its key.
    assert (
        "      LLM: http://vllm.internal:8000/v1, model Qwen/Qwen2.5-7B-Instruct (API key set)"
        in out
    )
    store = redis.Redis.from_url(server.url)
    stored = b"".join(store.get(key) or b"" for key in store.scan_iter("chalk:worker:*"))
    assert b"vllm.internal" in stored and b"sk-never-shown" not in stored
    assert "sk-never-shown" not in out
    assert "status: OK" in out

    worker.proc.terminate()  # a stopping worker leaves the list at once
    worker.proc.wait(30)
    gone = chalk(server.url, "health")
    assert gone.returncode == 1 and "workers: 0 alive" in gone.stdout


def test_health_says_when_redis_cannot_be_reached():
    from processes import free_port

    run = chalk(f"redis://127.0.0.1:{free_port()}/0", "health")
    assert run.returncode == 2
    assert "cannot reach Redis" in run.stderr


def test_purging_the_queue_of_an_unreachable_broker_says_so(ops_redis):
    from processes import free_port

    from chalk_client import ChalkSettings
    from chalk_client.cli.purge import purge_queue
    from chalk_client.errors import QueueUnavailableError

    broker = f"amqp://guest:secret@127.0.0.1:{free_port()}//"
    client = ChalkClient(ops_redis.url, settings=ChalkSettings(broker_url=broker))
    with pytest.raises(QueueUnavailableError, match="cannot reach the broker") as caught:
        purge_queue(client)
    assert "secret" not in str(caught.value)


@pytest.mark.slow
def test_purge_then_retry_only_what_failed(ops_redis, start_worker):
    url = ops_redis.url
    client = ChalkClient(url)
    store = redis.Redis.from_url(url)
    # No worker yet: a batch waits in the queue.
    waiting = client.submit_batch(passing("p", 3), batch_id="b-purged")
    status = chalk(url, "status", "b-purged")
    assert "queued 3" in status.stdout and "no job finished yet: no ETA" in status.stdout

    refused = chalk(url, "purge", "b-purged")
    assert refused.returncode == 2 and "--yes" in refused.stderr
    purged = chalk(url, "purge", "b-purged", "--yes")
    assert purged.returncode == 0, purged.stderr
    assert "batch b-purged: purged 3 job(s) that had not started" in purged.stdout
    results = waiting.results(timeout=10)  # waiters are told at once
    assert {r.status for r in results} == {JobStatus.FAILED}
    assert results[0].error == PURGED_ERROR

    other = client.submit_batch(passing("q", 2), batch_id="b-drained")
    drained = chalk(url, "purge", "--yes")
    assert drained.returncode == 0, drained.stderr
    # Five messages: three of b-purged (already failed: left alone), two of b-drained.
    assert "queue chalk: purged 2 job(s)" in drained.stdout and "3 done" in drained.stdout
    assert "(5 queue entries taken)" in drained.stdout
    assert store.llen("chalk") == 0 and held_count(store) == 0
    assert {r.status for r in other.results(timeout=10)} == {JobStatus.FAILED}

    # A worker comes; a mixed batch is scored; then only its failed jobs are sent again.
    worker = start_worker(url, concurrency=4)
    mixed = [*passing("m", 2), ScoringJob(id="m-bad", judge=CustomJudge("no_such_judge", {}))]
    first = {r.job_id: r for r in client.submit_batch(mixed, batch_id="b-mixed").results(30)}
    assert first["m-bad"].status is JobStatus.FAILED
    retried = chalk(url, "retry", "--failed", "b-mixed", "--wait")
    assert retried.returncode == 0, retried.stderr
    assert (
        "batch b-mixed: 1 failed or cancelled job(s), 1 sent again as batch b-mixed-retry-"
        in retried.stdout
    )
    after = {r.job_id: r for r in client.batch("b-mixed").results(timeout=10)}
    assert after["m-bad"].attempts == 2  # run again (and failed again: the judge is missing)
    assert after["m-0"] == first["m-0"] and after["m-1"] == first["m-1"]  # untouched

    again = chalk(url, "retry", "--failed", "b-purged", "--wait")
    assert again.returncode == 0, again.stderr
    assert "3 failed or cancelled job(s), 3 sent again" in again.stdout
    assert "succeeded 3, failed 0" in again.stdout
    done = chalk(url, "status", "b-purged")
    assert "batch b-purged: finished, 3/3 done" in done.stdout
    assert "succeeded 3, failed 0" in done.stdout and ", finished" in done.stdout
    assert worker.proc.poll() is None


def test_the_eta_is_the_rest_at_the_batch_s_own_pace():
    progress = BatchProgress(elapsed_s=100.0, done=25, total=125)
    assert progress.rate == 0.25
    assert progress.left_s == 400.0
    line = progress.render(now=time.time())
    assert "submitted 1 min 40 s ago, 0.2 jobs/s, ETA 6 min 40 s (about " in line
    assert BatchProgress(elapsed_s=5.0, done=0, total=3).left_s is None
    assert BatchProgress(elapsed_s=5.0, done=3, total=3).render().endswith("finished")
