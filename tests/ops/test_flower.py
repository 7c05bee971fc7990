"""Flower as an operator uses it: real workers, real Redis, Flower's HTTP API and its page.

``chalk flower`` watches two ``chalk worker`` processes scoring a batch with one
failing job. Through Flower's API each task is ``chalk.score`` with its job id
in the args, its batch in the kwargs, its outcome in the result; the failed job
is a ``FAILURE`` carrying the job's error; both workers are listed; ``/metrics``
serves Prometheus text. Headless Chromium (Debian's ``chromium``) then takes a
screenshot of the task list and of the failed task, kept in ``tests/artifacts/``
(``flower-tasks.png``, ``flower-failed-task.png``).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from processes import free_port, need, stop, wait_port
from support import say

from chalk_client import ChalkClient, JobStatus, ScoringJob
from chalk_client.cli.cluster import flower_defaults
from chalk_client.judges import AlwaysPassJudge, CustomJudge, RegexJudge

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts"


def start_flower(
    redis_url: str, log: Path, *, spaced: bool = False, **env: str
) -> tuple[subprocess.Popen[bytes], int]:
    """``chalk flower`` on a free loopback port (``--port N`` if ``spaced``, else ``--port=N``)."""
    port = free_port()
    flags = (
        ["--port", str(port), "--address", "127.0.0.1"]
        if spaced
        else [
            f"--port={port}",
            "--address=127.0.0.1",
        ]
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CHALK_", "FLOWER_"))}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "chalk_client.cli",
                "flower",
                *flags,
            ],
            env={**clean, "CHALK_REDIS_URL": redis_url, **env},
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return proc, port


def get(url: str, auth: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def get_json(url: str) -> Any:
    status, body = get(url)
    assert status == 200, body[:500]
    return json.loads(body)


def screenshot(url: str, path: Path, profile: Path) -> None:
    """A headless Chromium screenshot of ``url`` (its scripts given time to fetch the tasks)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        need("chromium (apt-get install chromium)")
    assert chromium is not None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=8000",
            f"--screenshot={path}",
            "--window-size=1400,900",
            url,
        ],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert path.is_file() and path.stat().st_size > 10_000, f"no screenshot at {path}"


@pytest.fixture
def flowers(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        stop(proc)


@pytest.mark.slow
def test_flower_shows_each_job_its_batch_and_failures(ops_redis, start_worker, flowers, tmp_path):
    url = ops_redis.url
    # Flower with its API open (as a test needs), and one locked as docker-compose runs it.
    flower, port = start_flower(url, tmp_path / "flower.log", FLOWER_UNAUTHENTICATED_API="true")
    locked, locked_port = start_flower(  # with `--port 5555`, as every other command takes it
        url, tmp_path / "locked.log", spaced=True, FLOWER_BASIC_AUTH="admin:s3cret"
    )
    flowers.extend([flower, locked])
    workers = [start_worker(url, concurrency=4) for _ in range(2)]
    assert wait_port(port, timeout=30), (tmp_path / "flower.log").read_text()
    base = f"http://127.0.0.1:{port}"
    client = ChalkClient(url)
    deadline = time.monotonic() + 30
    while True:  # until Flower hears the workers' events: a job it sees
        client.submit_and_wait(ScoringJob(judge=AlwaysPassJudge()), timeout=30)
        if get_json(f"{base}/api/tasks"):
            break
        assert time.monotonic() < deadline, (tmp_path / "flower.log").read_text()
        time.sleep(0.2)

    jobs = [
        ScoringJob(
            id=f"rollout-{i:03d}",
            transcript=say(f"answer: {i}"),
            judge=RegexJudge([r"answer: \d*[02468]$"]),
        )
        for i in range(8)
    ]
    jobs.append(ScoringJob(id="rollout-broken", judge=CustomJudge("no_such_judge", {})))
    jobs.append(ScoringJob(id="rollout-pass", judge=AlwaysPassJudge()))
    batch = client.submit_batch(jobs, batch_id="b-flower-demo")
    results = {r.job_id: r for r in batch.results(timeout=60)}
    assert results["rollout-broken"].status is JobStatus.FAILED

    deadline = time.monotonic() + 30
    while True:
        tasks = get_json(f"{base}/api/tasks?search=kwargs:batch=b-flower-demo")
        done = [t for t in tasks.values() if t.get("state") in ("SUCCESS", "FAILURE")]
        if len(done) >= len(jobs):
            break
        assert time.monotonic() < deadline, tasks
        time.sleep(0.3)
    by_job = {json.loads(t["args"].replace("'", '"'))[0]: t for t in tasks.values()}
    assert set(by_job) == {job.id for job in jobs}
    for task in by_job.values():
        assert task["name"] == "chalk.score"
        assert task["kwargs"] == "{'batch': 'b-flower-demo'}"
        assert task["worker"] in {f"{w.name}@{os.uname().nodename}" for w in workers}
    assert by_job["rollout-000"]["state"] == "SUCCESS"
    assert by_job["rollout-000"]["result"] == "'succeeded, score 1.0'"
    assert by_job["rollout-001"]["result"] == "'succeeded, score 0.0'"
    broken = by_job["rollout-broken"]
    assert broken["state"] == "FAILURE"
    assert "JobFailedError" in broken["exception"] and "no_such_judge" in broken["exception"]

    # The searches the README gives operators: a batch, the failures.
    everything = get_json(f"{base}/api/tasks")
    assert len(everything) > len(tasks) == len(jobs)  # the warm-up jobs are in no batch
    failures = get_json(f"{base}/api/tasks?state=FAILURE")
    assert [json.loads(t["args"].replace("'", '"'))[0] for t in failures.values()] == [
        "rollout-broken"
    ]
    detail = get_json(f"{base}/api/task/info/{broken['uuid']}")
    assert detail["args"] == "['rollout-broken']"

    # Flower asks the workers by broadcast and keeps whoever answers within its timeout; a
    # worker busy at that instant answers the next ask.
    names = {f"{w.name}@{os.uname().nodename}" for w in workers}
    deadline = time.monotonic() + 30
    while not names <= set(known := get_json(f"{base}/api/workers?refresh=1")):
        assert time.monotonic() < deadline, (names, known)
        time.sleep(0.5)

    status, metrics = get(f"{base}/metrics")
    assert status == 200
    assert b'flower_events_total{task="chalk.score"' in metrics
    assert b'type="task-failed"' in metrics

    # Locked: pages and API need the credentials from the environment.
    assert wait_port(locked_port, timeout=30), (tmp_path / "locked.log").read_text()
    locked_base = f"http://127.0.0.1:{locked_port}"
    assert get(f"{locked_base}/tasks")[0] == 401
    assert get(f"{locked_base}/api/tasks")[0] == 401
    assert get(f"{locked_base}/tasks", auth="admin:s3cret")[0] == 200
    # Flower serves /metrics to anyone (as Prometheus scrapes it): why docker-compose.yml
    # publishes port 5555 on the host's loopback only (README "Operating Chalk Queue").
    assert get(f"{locked_base}/metrics")[0] == 200

    assert get(f"{base}/tasks")[0] == 200
    screenshot(f"{base}/tasks", ARTIFACTS / "flower-tasks.png", tmp_path / "chromium")
    screenshot(
        f"{base}/task/{broken['uuid']}", ARTIFACTS / "flower-failed-task.png", tmp_path / "chromium"
    )


def test_chalk_flower_shows_job_ids_batches_and_outcomes_by_default(monkeypatch):
    columns = "--tasks_columns=name,args,state,result,kwargs,worker,runtime,received"
    assert columns in flower_defaults([])
    assert not any(a.startswith("--tasks_columns") for a in flower_defaults(["--tasks_columns=x"]))
    monkeypatch.setenv("FLOWER_TASKS_COLUMNS", "name,uuid")
    assert columns not in flower_defaults([])


@pytest.mark.slow
def test_flower_shows_a_dead_worker_s_attempt_failed_and_the_rerun_in_its_batch(
    ops_redis, start_worker, flowers, tmp_path
):
    url = ops_redis.url
    flower, port = start_flower(url, tmp_path / "flower.log", FLOWER_UNAUTHENTICATED_API="true")
    flowers.append(flower)
    doomed = start_worker(url, concurrency=2)
    assert wait_port(port, timeout=30), (tmp_path / "flower.log").read_text()
    base = f"http://127.0.0.1:{port}"
    client = ChalkClient(url)
    deadline = time.monotonic() + 30
    while not get_json(f"{base}/api/tasks"):  # until Flower hears the worker's events
        client.submit_and_wait(ScoringJob(judge=AlwaysPassJudge()), timeout=30)
        assert time.monotonic() < deadline, (tmp_path / "flower.log").read_text()
        time.sleep(0.2)

    gate = tmp_path / "gate"
    log = tmp_path / "scorings.log"
    jobs = [
        ScoringJob(
            id=f"lost-{i}",
            judge=CustomJudge("test_log", {"log": str(log), "key": f"lost-{i}", "gate": str(gate)}),
        )
        for i in range(2)
    ]
    batch = client.submit_batch(jobs, batch_id="b-lost")
    search = f"{base}/api/tasks?search=kwargs:batch=b-lost"

    def tasks_in(state: str) -> list[dict[str, Any]]:
        return [t for t in get_json(search).values() if t.get("state") == state]

    deadline = time.monotonic() + 30
    while len(tasks_in("STARTED")) < 2:
        assert time.monotonic() < deadline, get_json(search)
        time.sleep(0.2)
    first = {t["uuid"] for t in tasks_in("STARTED")}
    doomed.proc.send_signal(signal.SIGKILL)
    doomed.proc.wait()
    gate.touch()
    rescuer = start_worker(url, concurrency=2)
    results = batch.results(timeout=60)
    assert all(r.status is JobStatus.SUCCEEDED and r.attempts == 2 for r in results)

    deadline = time.monotonic() + 30
    while len(tasks_in("SUCCESS")) < 2 or len(tasks_in("FAILURE")) < 2:
        assert time.monotonic() < deadline, get_json(search)
        time.sleep(0.3)
    failed = tasks_in("FAILURE")
    assert {t["uuid"] for t in failed} == first  # the dead worker's attempts, shown lost
    for task in failed:
        assert task["worker"] == f"{doomed.name}@{os.uname().nodename}"
        assert "WorkerLostError('worker died: job lost-" in task["exception"]
        assert "sent again as task" in task["exception"]
    for task in tasks_in("SUCCESS"):  # the re-runs keep the batch label
        assert task["kwargs"] == "{'batch': 'b-lost'}"
        assert task["worker"] == f"{rescuer.name}@{os.uname().nodename}"
