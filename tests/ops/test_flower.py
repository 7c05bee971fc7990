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
import re
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

    # The searches the docs give operators: a batch, the failures.
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
    # publishes port 5555 on the host's loopback only (docs/operating/flower.md).
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


BACKLOG = 12
"""Jobs sent for the Broker page: the worker takes ``TAKEN`` of them and waits on a gate."""
TAKEN = 2


def tls_redis(tmp_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A redis-server speaking TLS only, with a CA of the test's; its ``rediss://`` URL."""
    if shutil.which("openssl") is None:
        need("openssl")
    tls = tmp_path / "tls"
    tls.mkdir()

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=tls, check=True, capture_output=True)

    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "1",
        "-subj",
        "/CN=chalk-test-ca",
    )
    openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    )
    (tls / "ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "1",
        "-extfile",
        "ext",
    )
    port = free_port()
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            "0",
            "--tls-port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--tls-cert-file",
            "server.crt",
            "--tls-key-file",
            "server.key",
            "--tls-ca-cert-file",
            "ca.crt",
            "--tls-auth-clients",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tls),
        ],
        cwd=tls,
        stdout=subprocess.DEVNULL,
    )
    if not wait_port(port):
        stop(proc)
        need("a redis-server built with TLS")
    ca = tls / "ca.crt"
    return proc, f"rediss://127.0.0.1:{port}/0?ssl_cert_reqs=required&ssl_ca_certs={ca}"


def queue_depths_on_broker_page(base: str) -> dict[str, int]:
    """Each queue's waiting messages, as Flower's Broker page shows them."""
    status, body = get(f"{base}/broker")
    assert status == 200, body[:500]
    rows = re.findall(
        r'<tr id="[^"]*">\s*<td>([^<]+)</td>\s*<td[^>]*>(\d+)</td>', body.decode(), flags=re.S
    )
    return {name: int(depth) for name, depth in rows}


def queued_in_chalk_status(redis_url: str) -> int:
    """``queued messages (chalk): N`` of ``chalk status``, run as an operator would."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CHALK_")}
    done = subprocess.run(
        [sys.executable, "-m", "chalk_client.cli", "status"],
        env={**clean, "CHALK_REDIS_URL": redis_url},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    match = re.search(r"queued messages \(chalk\): (\d+)", done.stdout)
    assert match, done.stdout + done.stderr
    return int(match.group(1))


@pytest.fixture
def broker_url(request, ops_redis, tmp_path) -> Iterator[str]:
    """The cluster's URL, of the kind the test is parametrized with."""
    kind = request.param
    if kind == "redis":
        yield ops_redis.url
    elif kind == "rediss":
        proc, url = tls_redis(tmp_path)
        yield url
        stop(proc)
    else:
        from sentinel_cluster import SentinelCluster

        with SentinelCluster(tmp_path / "sentinel", master_name="grading") as cluster:
            yield cluster.url(0)


@pytest.mark.slow
@pytest.mark.parametrize("broker_url", ["redis", "rediss", "sentinel"], indirect=True)
def test_flower_s_broker_page_shows_the_backlog_chalk_status_counts(
    broker_url, start_worker, flowers, tmp_path
):
    flower, port = start_flower(broker_url, tmp_path / "flower.log")
    flowers.append(flower)
    worker = start_worker(broker_url, concurrency=TAKEN)
    assert wait_port(port, timeout=30), (tmp_path / "flower.log").read_text()
    base = f"http://127.0.0.1:{port}"
    gate = tmp_path / "gate"
    log = tmp_path / "scorings.log"
    judge = {"log": str(log), "gate": str(gate)}
    with ChalkClient(broker_url) as client:
        backlog(client, broker_url, base, worker, judge, gate)
    assert queued_in_chalk_status(broker_url) == 0


def backlog(
    client: ChalkClient, url: str, base: str, worker: Any, judge: dict[str, str], gate: Path
) -> None:
    """Send the backlog; check the Broker page and ``chalk status`` agree; let it through."""
    batch = client.submit_batch(
        [
            ScoringJob(id=f"wait-{i}", judge=CustomJudge("test_log", {**judge, "key": f"wait-{i}"}))
            for i in range(BACKLOG)
        ]
    )
    deadline = time.monotonic() + 30
    while client.store.running_count() < TAKEN:  # the worker holds its two, the rest wait
        assert time.monotonic() < deadline, worker.log.read_text()[-3000:]
        time.sleep(0.1)

    depths = queue_depths_on_broker_page(base)
    assert depths == {"chalk": BACKLOG - TAKEN}
    assert queued_in_chalk_status(url) == BACKLOG - TAKEN
    _, page = get(f"{base}/broker")
    assert b"chalk_worker" not in page  # the broker shown by its URL, not Chalk's transport

    gate.touch()
    assert all(r.status is JobStatus.SUCCEEDED for r in batch.results(timeout=60))
    assert queue_depths_on_broker_page(base) == {"chalk": 0}


def test_flower_s_app_names_its_broker_in_a_scheme_flower_knows():
    import ssl

    from chalk_client import ChalkSettings
    from chalk_worker.app import make_flower_app

    def broker_of(url: str) -> tuple[str, Any, dict[str, Any]]:
        app = make_flower_app(ChalkSettings(redis_url=url), url)
        with app.connection() as connection:
            uri = connection.as_uri()
        return uri, app.conf.broker_use_ssl, dict(app.conf.broker_transport_options)

    uri, tls, options = broker_of("redis://127.0.0.1:6379/2")
    assert uri.startswith("redis://") and not tls
    assert options["priority_steps"] == [0] and not any(k.startswith("chalk") for k in options)

    uri, tls, _ = broker_of("rediss://h:6380/0?ssl_cert_reqs=required&ssl_ca_certs=/ca.pem")
    assert uri.startswith("rediss://")
    assert tls == {"ssl_cert_reqs": ssl.CERT_REQUIRED, "ssl_ca_certs": "/ca.pem"}

    uri, _, options = broker_of("sentinel://:pw@a:26379;sentinel://b:26380/1?master_name=grading")
    assert uri.startswith("sentinel://")
    assert options["master_name"] == "grading"
