"""``chalk worker`` in several processes: shared slots, one name each, stopped together."""

from __future__ import annotations

import os
import signal
import time
import types
from collections import Counter

import psutil
import pytest
from processes import stop

from chalk_client import ChalkClient, JobStatus, ScoringJob
from chalk_client.cli.processes import (
    Child,
    Supervisor,
    child_name,
    option_value,
    supervise,
    take_processes,
)
from chalk_client.cores import cores_per_process, usable_cores
from chalk_client.errors import ConfigurationError
from chalk_client.judges import AlwaysPassJudge, CustomJudge


def celery_workers(parent: int) -> list[psutil.Process]:
    return [p for p in psutil.Process(parent).children() if "chalk_worker.app" in p.cmdline()]


def wait_until(check, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def sleepers(count: int, sleep_s: float = 0.5) -> list[ScoringJob]:
    return [
        ScoringJob(judge=CustomJudge("test_async_sleep", {"sleep_s": sleep_s}))
        for _ in range(count)
    ]


def test_processes_default_to_one_per_core_with_the_threads_pool(monkeypatch):
    monkeypatch.delenv("CHALK_WORKER_PROCESSES", raising=False)
    assert take_processes(["-l", "info"], None) == (usable_cores(), ["-l", "info"])
    assert take_processes([], "threads")[0] == usable_cores()
    assert take_processes([], "prefork")[0] == 1  # its own processes already
    assert take_processes(["--processes", "3", "-c", "8"], None) == (3, ["-c", "8"])
    assert take_processes(["--processes=1"], None) == (1, [])
    monkeypatch.setenv("CHALK_WORKER_PROCESSES", "2")
    assert take_processes([], "prefork")[0] == 2
    for bad in ("0", "two", "-1"):
        with pytest.raises(ConfigurationError, match="whole number of at least 1"):
            take_processes(["--processes", bad], None)
    with pytest.raises(ConfigurationError, match="needs a value"):
        take_processes(["--processes"], None)


def test_each_process_is_named_after_the_worker_and_gets_its_share_of_cores(monkeypatch):
    assert child_name("w1@%h", 2) == "w1-2@%h"
    assert child_name(None, 1) == "celery-1@%h"
    assert option_value(["-nname@h", "-c", "4"], ("-n", "--hostname")) == ("name@h", ["-c", "4"])
    monkeypatch.setenv("CHALK_WORKER_PROCESSES", str(usable_cores()))
    assert cores_per_process() == 1
    monkeypatch.setenv("CHALK_WORKER_PROCESSES", "1")
    assert cores_per_process() == usable_cores()
    for single in ("--detach", "-B", "--statedb=/tmp/state"):
        with pytest.raises(ConfigurationError, match="needs one process: add --processes 1"):
            supervise(["celery", "worker", single], 2, 64)
    monkeypatch.setenv("CHALK_METRICS_PORT", "65535")
    with pytest.raises(ConfigurationError, match="choose a lower port"):
        supervise(["celery", "worker"], 2, 64)


def test_a_hangup_is_passed_on_and_the_parent_goes_on(monkeypatch):
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: sent.append((pid, sig)))
    children = [Child(n, [], {}) for n in (1, 2)]
    for n, child in enumerate(children):
        child.proc = types.SimpleNamespace(pid=1000 + n)  # type: ignore[assignment]
    parent = Supervisor(children)
    parent._on_signal(signal.SIGHUP, None)  # Celery restarts in place on it
    assert sent == [(1000, signal.SIGHUP), (1001, signal.SIGHUP)] and not parent.stopping
    parent._on_signal(signal.SIGTERM, None)
    assert sent[2:] == [(1000, signal.SIGTERM), (1001, signal.SIGTERM)] and parent.stopping


@pytest.mark.slow
def test_two_processes_share_the_slots_and_stop_together(own_redis_url, start_worker):
    uneven = start_worker(own_redis_url, concurrency=5, args=("--processes", "2"))
    uneven.wait_for(f"2 worker processes, 5 slots in all ({uneven.name}-1@")
    assert sorted(
        int(c.cmdline()[c.cmdline().index("--concurrency") + 1]) for c in celery_workers(uneven.pid)
    ) == [2, 3]
    stop(uneven.proc)
    worker = start_worker(own_redis_url, concurrency=8, args=("--processes", "2"))
    worker.wait_for(f"2 worker processes, 4 slots each ({worker.name}-1@")
    wait_until(lambda: worker.text().count(" ready.") == 2)
    client = ChalkClient(own_redis_url)
    # 16 jobs of 0.5 s on 8 slots: both processes score, each at most 4 at once.
    results = client.submit_batch(sleepers(16)).results(timeout=60)
    assert all(r.status is JobStatus.SUCCEEDED for r in results)
    by_process = Counter(r.worker.split("@")[0] for r in results)
    assert set(by_process) == {f"{worker.name}-1", f"{worker.name}-2"}, by_process
    children = celery_workers(worker.pid)
    assert len(children) == 2

    worker.proc.send_signal(signal.SIGTERM)
    assert worker.proc.wait(30) == 0
    assert not any(child.is_running() and child.status() != "zombie" for child in children)


@pytest.mark.slow
def test_a_process_that_dies_is_started_again_and_every_job_still_succeeds(
    own_redis_url, start_worker
):
    worker = start_worker(own_redis_url, concurrency=8, args=("--processes", "2"))
    wait_until(lambda: worker.text().count(" ready.") == 2)
    client = ChalkClient(own_redis_url)
    batch = client.submit_batch(sleepers(24, 1.0))
    time.sleep(1.5)  # both processes hold jobs
    victim = celery_workers(worker.pid)[0]
    victim.kill()
    worker.wait_for(f"(pid {victim.pid}) exited with code 137; starting it again")
    wait_until(lambda: worker.text().count(" ready.") == 3)
    results = batch.results(timeout=90)
    assert all(r.status is JobStatus.SUCCEEDED for r in results)
    assert len({r.job_id for r in results}) == 24
    assert worker.proc.poll() is None and len(celery_workers(worker.pid)) == 2
    stop(worker.proc)


@pytest.mark.slow
def test_processes_of_a_parent_killed_outright_stop_on_their_own(own_redis_url, start_worker):
    worker = start_worker(own_redis_url, concurrency=4, args=("--processes", "2"))
    wait_until(lambda: worker.text().count(" ready.") == 2)
    children = celery_workers(worker.pid)
    os.kill(worker.pid, signal.SIGKILL)
    worker.proc.wait(10)
    psutil.wait_procs(children, timeout=30)
    assert not any(child.is_running() for child in children)
    client = ChalkClient(own_redis_url)
    assert client.submit(ScoringJob(judge=AlwaysPassJudge())).status() == "queued"
