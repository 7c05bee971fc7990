"""A catastrophic regex through a real ``chalk worker``: its verdict, and the worker goes on."""

from __future__ import annotations

import time

import psutil
from processes import stop
from support import say

from chalk_client import ChalkClient, JobStatus, ScoringJob
from chalk_client.judges import RegexJudge


def helpers_of(pid: int) -> list[psutil.Process]:
    return [
        child
        for child in psutil.Process(pid).children()
        if any(part.endswith("regex/search.py") for part in child.cmdline())
    ]


def running(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_catastrophic_regex_gets_its_verdict_and_the_worker_goes_on(own_redis_url, start_worker):
    worker = start_worker(own_redis_url, concurrency=4, env={"CHALK_REGEX_TIMEOUT_S": "1"})
    client = ChalkClient(own_redis_url)
    hostile = client.submit(
        ScoringJob(id="redos", transcript=say("a" * 40 + "b"), judge=RegexJudge([r"(a+)+$"]))
    )
    time.sleep(0.2)  # the hostile job is searching when the next one arrives
    normal = client.submit_and_wait(
        ScoringJob(id="after", transcript=say("answer: 42"), judge=RegexJudge([r"\b42$"])),
        timeout=10,
    )
    assert normal.status is JobStatus.SUCCEEDED and normal.scoring is not None
    assert normal.scoring.score == 1.0
    verdict = hostile.wait(20)
    assert verdict.status is JobStatus.SUCCEEDED and verdict.scoring is not None
    assert verdict.scoring.score == 0.0 and not verdict.scoring.continue_task
    assert "did not finish within 1 s" in verdict.scoring.metadata["error"]
    assert verdict.attempts == 1  # the worker kept its lease: nobody took the job over
    assert verdict.worker == normal.worker
    # The worker still takes jobs, and leaves no helper behind when it stops.
    again = client.submit_and_wait(
        ScoringJob(id="again", transcript=say("ok"), judge=RegexJudge(["ok"])), timeout=10
    )
    assert again.scoring is not None and again.scoring.score == 1.0
    helpers = helpers_of(worker.pid)
    assert helpers
    stop(worker.proc)
    deadline = time.monotonic() + 5
    while any(map(running, helpers)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(map(running, helpers))
