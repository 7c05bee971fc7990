"""Restarts lose nothing: Redis restarted mid-batch, a worker stopped with SIGTERM, Redis late.

Real processes throughout: ``chalk worker`` processes, a redis-server with AOF
on (``appendfsync everysec``) stopped and started again on the same port, and
the ``test_log`` judge recording each scoring's start and end with its pid.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter

import pytest
import redis
from support import held_count, logged_jobs, wait_until

from chalk_client import ChalkClient, JobStatus, ScoringJob, Submission
from chalk_client.judges import AlwaysPassJudge, ExecutableJudge

SCRIPT = (
    "import json, sys\n"
    "n = int(open(sys.argv[1]).read())\n"
    "json.dump({'score': n % 2, 'metadata': {}}, open(sys.argv[2], 'w'))\n"
)


def ended(scorings) -> Counter[str]:  # type: ignore[no-untyped-def]
    return Counter(key for event, key, _ in scorings() if event == "end")


@pytest.mark.slow
def test_a_redis_restart_mid_batch_loses_nothing(make_redis, start_worker, scorings):
    server = make_redis(aof=True)
    # At chalk worker's default concurrency (64 threads): Celery gives back, through a
    # channel whose connection it already dropped, what the threads hold.
    workers = [start_worker(server.url, concurrency=None) for _ in range(2)]
    jobs = logged_jobs("r", 60, scorings.path, sleep_s=0.2)
    client = ChalkClient(server.url)
    batch = client.submit_batch(jobs)
    wait_until(lambda: sum(ended(scorings).values()) >= 10, 30, "10 jobs scored")

    def restart() -> None:  # longer than the leases (2 s) and than redis-py's own retries
        server.stop(signal.SIGTERM)
        time.sleep(5.0)
        server.start()

    restarter = threading.Thread(target=restart)
    restarter.start()
    try:
        results = batch.results(timeout=90)  # the client waits through the restart
    finally:
        restarter.join()
    assert [r.status for r in results] == [JobStatus.SUCCEEDED] * len(jobs)
    assert ended(scorings) == {job.id: 1 for job in jobs}  # each scored once, to the end
    store = redis.Redis.from_url(server.url)
    assert store.zcard("chalk:running") == 0
    assert store.llen("chalk") == 0
    for worker in workers:
        assert worker.proc.poll() is None, worker.text()[-3000:]
        assert "Unrecoverable error" not in worker.text()
        assert "is reachable again" in worker.text()
        assert "re-enqueueing" not in worker.text()  # live workers' jobs were not taken


@pytest.mark.slow
def test_a_worker_stopped_with_sigterm_finishes_its_jobs_and_hands_back_the_rest(
    ops_redis, start_worker, scorings
):
    url = ops_redis.url
    stopping = start_worker(url, concurrency=2, args=("--prefetch-multiplier", "4"))
    jobs = logged_jobs("t", 12, scorings.path, sleep_s=1.0)
    client = ChalkClient(url)
    batch = client.submit_batch(jobs)
    store = redis.Redis.from_url(url)
    # The worker runs two jobs and holds more messages it has not started (prefetch).
    wait_until(
        lambda: sum(p == stopping.pid for e, _, p in scorings() if e == "start") == 2,
        20,
        "two jobs started",
    )
    wait_until(lambda: held_count(store) > 2, 10, "messages reserved beyond the running two")
    stopping.proc.send_signal(signal.SIGTERM)
    other = start_worker(url, concurrency=4)
    assert stopping.proc.wait(30) == 0
    results = batch.results(timeout=60)
    assert [r.status for r in results] == [JobStatus.SUCCEEDED] * len(jobs)
    assert ended(scorings) == {job.id: 1 for job in jobs}
    started_by_stopping = {k for e, k, p in scorings() if e == "start" and p == stopping.pid}
    ended_by_stopping = {k for e, k, p in scorings() if e == "end" and p == stopping.pid}
    assert started_by_stopping == ended_by_stopping  # it finished what it had started
    by_id = {r.job_id: r for r in results}
    handed_back = {job.id for job in jobs} - started_by_stopping
    assert handed_back and all(by_id[k].worker.startswith(other.name) for k in handed_back)
    assert all(by_id[k].attempts == 1 for k in by_id)  # nothing ran twice
    wait_until(lambda: held_count(store) == 0, 10, "every message acknowledged")


@pytest.mark.slow
def test_a_worker_started_before_redis_waits_for_it_and_says_so(make_redis, start_worker):
    server = make_redis(start=False)
    worker = start_worker(server.url, wait=False)
    worker.wait_for("waiting for Redis at redis://127.0.0.1:", timeout=30)
    assert "Connection refused" in worker.text()
    assert " ready." not in worker.text()
    server.start()
    worker.wait_for(" ready.", timeout=30)
    worker.wait_for("answers after")
    result = ChalkClient(server.url).submit_and_wait(
        ScoringJob(id="after-start", judge=AlwaysPassJudge()), timeout=30
    )
    assert result.status is JobStatus.SUCCEEDED


@pytest.mark.slow
def test_two_workers_on_one_host_one_stopped_while_the_other_scores_scripts(
    ops_redis, start_worker
):
    # The sandbox's per-slot state (cgroups, locks) is the machine's, shared by both.
    url = ops_redis.url
    env = {"CHALK_SANDBOX_SLOTS": "4"}
    staying = start_worker(url, concurrency=4, env=env)
    leaving = start_worker(url, concurrency=4, env=env)
    client = ChalkClient(url)
    command = ["{python}", "-c", SCRIPT, "{submission}", "out.json"]

    def scripts(prefix: str, count: int) -> list[ScoringJob]:
        return [
            ScoringJob(
                id=f"{prefix}-{i:02d}",
                judge=ExecutableJudge(command),
                submission=Submission.from_files({"n.txt": str(i)}),
            )
            for i in range(count)
        ]

    first = client.submit_batch(scripts("s", 40)).results(timeout=120)
    assert {r.worker.split("@")[0] for r in first} == {staying.name, leaving.name}
    leaving.proc.send_signal(signal.SIGTERM)  # it removes what it may of the shared slots
    assert leaving.proc.wait(60) == 0
    after = client.submit_batch(scripts("t", 20)).results(timeout=120)
    for result in [*first, *after]:
        assert result.status is JobStatus.SUCCEEDED, result.error
        assert result.score == int(result.job_id.split("-")[1]) % 2, result.scoring
    assert all(r.worker.startswith(staying.name) for r in after)
