"""Cancelling a batch with real workers: nothing of it starts after, nothing of it runs on.

Slow scoring scripts carry a marker in their command line, so the test finds
them among the machine's processes; a ``chaos_log`` judge in front of each job
records every start.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import redis
from support import survivors, wait_until

from chalk_client import ChalkClient, JobStatus, ScoringJob
from chalk_client.cluster.cancel import CancelOutcome
from chalk_client.judges import AlwaysPassJudge, CustomJudge, ExecutableJudge

SLOW = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', sys.argv[1]])\n"
    "time.sleep(120)\n"
)
"""A script that sleeps, and starts a child that sleeps too (the marker in both's argv)."""


def starts(log: Path) -> list[str]:
    return [line.split()[0] for line in log.read_text().splitlines()]


@pytest.mark.slow
def test_cancel_kills_running_scripts_and_nothing_else_of_the_batch_starts(
    own_redis_url, start_worker, tmp_path
):
    log = tmp_path / "starts.log"
    log.touch()
    marker = f"chalk-cancel-{uuid.uuid4().hex}"
    # Cold runs: a warm one is a fork of an interpreter, whose command line is not the job's.
    start_worker(own_redis_url, concurrency=4, env={"CHALK_WARM_PYTHON": "false"})
    client = ChalkClient(own_redis_url)
    jobs = [
        ScoringJob(
            id=f"slow-{i}",
            judge=CustomJudge("chaos_log", {"log": str(log), "key": f"slow-{i}"})
            & ExecutableJudge(["{python}", "-c", SLOW, marker, "out.json"]),
        )
        for i in range(12)
    ]
    batch = client.submit_batch(jobs, batch_id="to-cancel")
    wait_until(lambda: len(survivors(marker)) >= 4, 60, "two scripts and their children")
    waited: list[object] = []
    waiter = threading.Thread(target=lambda: waited.append(batch.wait(timeout=60)))
    waiter.start()
    started_before = set(starts(log))

    report = batch.cancel()
    cancelled_at = time.monotonic()
    assert report.cancelled == 12 and report.outcomes[CancelOutcome.RUNNING] >= 2, report.render()
    assert "cancelled 12 of 12 job(s)" in report.render()
    wait_until(lambda: not survivors(marker), 3, "every script of the batch to be killed")
    assert time.monotonic() - cancelled_at < 3
    waiter.join(10)
    assert waited, "wait() did not return after the cancel"
    results = batch.results(timeout=1)
    assert {r.status for r in results} == {JobStatus.CANCELLED}
    assert all("cancelled" in (r.error or "") for r in results)

    # The workers go on with other work at once; nothing of the batch started meanwhile.
    after = client.submit_batch(
        [ScoringJob(id=f"next-{i}", judge=AlwaysPassJudge()) for i in range(8)]
    )
    assert [r.status for r in after.results(timeout=30)] == [JobStatus.SUCCEEDED] * 8
    time.sleep(1.5)
    assert set(starts(log)) == started_before
    assert not survivors(marker)
    again = batch.cancel()
    assert again.cancelled == 0 and "nothing to cancel" in again.render()
    store = redis.Redis.from_url(own_redis_url)
    assert store.llen("chalk") == 0 and list(store.scan_iter("chalk:lane:*")) == []


@pytest.mark.slow
def test_cancel_abandons_jobs_waiting_on_the_event_loop(own_redis_url, start_worker):
    # Jobs awaiting a slow reply (as rubric calls do) hold the worker's only slots.
    start_worker(own_redis_url, concurrency=2)
    client = ChalkClient(own_redis_url)
    waiting = client.submit_batch(
        [
            ScoringJob(id=f"llm-{i}", judge=CustomJudge("test_async_sleep", {"sleep_s": 120}))
            for i in range(2)
        ]
    )
    wait_until(lambda: waiting.summary().running == 2, 30, "both jobs to run")
    assert waiting.cancel().outcomes[CancelOutcome.RUNNING] == 2
    quick = client.submit_batch(
        [ScoringJob(id=f"q-{i}", judge=AlwaysPassJudge()) for i in range(4)]
    )
    assert [r.status for r in quick.results(timeout=15)] == [JobStatus.SUCCEEDED] * 4
    assert {r.status for r in waiting.results(timeout=1)} == {JobStatus.CANCELLED}


def test_chalk_cancel_says_plainly_what_it_did(own_redis_url):
    env = {**os.environ, "CHALK_REDIS_URL": own_redis_url}
    client = ChalkClient(own_redis_url)
    client.submit_batch(
        [ScoringJob(id=f"c-{i}", judge=AlwaysPassJudge()) for i in range(3)], batch_id="b1"
    )

    def chalk(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "chalk_client.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    done = chalk("cancel", "b1")
    assert done.returncode == 0, done.stderr
    assert "batch b1: cancelled 3 of 3 job(s): 3 waiting (they will not start)" in done.stdout
    again = chalk("cancel", "b1")
    assert again.returncode == 0 and "nothing to cancel" in again.stdout
    unknown = chalk("cancel", "no-such-batch")
    assert unknown.returncode == 1 and "Traceback" not in unknown.stderr
    assert "no batch 'no-such-batch' in the cluster" in unknown.stderr
    status = chalk("status", "b1")
    assert "cancelled 3" in status.stdout, status.stdout
