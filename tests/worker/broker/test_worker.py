"""``chalk worker`` processes: bad messages, a killed worker, a lost Redis, a RabbitMQ broker."""

from __future__ import annotations

import base64
import json
import os
import signal
import time
import urllib.request
import uuid
from collections import Counter

import pytest
import redis
from processes import free_port, need, start_redis, stop, wait_port
from support import held_count

from chalk_client import ChalkClient, ChalkSettings, JobStatus, ScoringJob
from chalk_client.cluster.messages import redis_message
from chalk_client.judges import AlwaysPassJudge, CustomJudge


def message(job_id: str = "x", **changes: object) -> dict:
    """A ``chalk.score`` message as kombu stores it in Redis, with ``changes`` applied."""
    raw = json.loads(redis_message(job_id, "chalk"))
    body = changes.pop("body", None)
    if body is not None:
        raw["body"] = base64.b64encode(json.dumps(body).encode()).decode()
    raw["headers"].update(changes.pop("headers", {}))
    raw.update(changes)
    return raw


def test_malformed_and_unknown_messages_are_logged_and_dropped(client, redis_url, shared_worker):
    store = redis.Redis.from_url(redis_url)
    embed = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
    bad = [
        message(body=[[], {}, embed]),
        message(body=[[42], {}, embed]),
        message(body=[["a", "b"], {}, embed]),
        message(body=[[], {"job": "x"}, embed]),
        message(body=[["x" * 600], {}, embed]),
        message("no-such-job"),
        message(headers={"task": "chalk.unknown"}),
        message(**{"content-type": "application/x-python-serialize"}),
        {**message(), "body": base64.b64encode(b"{not json").decode()},
    ]
    for raw in bad:
        store.lpush("chalk", json.dumps(raw))
    store.lpush("chalk", "not even JSON")  # kombu alone would stop the worker on this
    # The worker goes on: a good job behind them is scored.
    result = client.submit_and_wait(ScoringJob(id="after", judge=AlwaysPassJudge()), timeout=30)
    assert result.status is JobStatus.SUCCEEDED
    shared_worker.wait_for("no record of job no-such-job")
    log = shared_worker.text()
    assert log.count("dropping a chalk.score message with malformed arguments") >= 5
    assert "chalk.unknown" in log
    assert "dropped an entry of the queue that is not a task message" in log
    assert store.keys("chalk:result:*") == [b"chalk:result:after"]


def test_a_record_that_cannot_be_read_ends_failed(client, redis_url):
    store = redis.Redis.from_url(redis_url)
    store.hset("chalk:job:corrupt", mapping={"job": "{not a job", "blob": ""})
    store.hset(
        "chalk:job:no-archive",
        mapping={
            "job": ScoringJob(id="no-archive", judge=AlwaysPassJudge()).model_dump_json(),
            "blob": "0" * 64,
        },
    )
    corrupt = client.job("corrupt")
    no_archive = client.job("no-archive")
    for job_id in ("corrupt", "no-archive"):
        store.lpush("chalk", redis_message(job_id, "chalk"))
    failed = corrupt.wait(30)
    assert failed.status is JobStatus.FAILED and "not a valid job" in (failed.error or "")
    expired = no_archive.wait(30)
    assert expired.status is JobStatus.FAILED and "archive" in (expired.error or "")


@pytest.mark.slow
def test_a_killed_worker_s_jobs_are_scored_once_by_another(
    own_redis_url, start_worker, scorings, tmp_path
):
    redis_url = own_redis_url
    gate = tmp_path / "gate"
    first = start_worker(redis_url, concurrency=4)
    jobs = [
        ScoringJob(
            id=f"k-{i:02d}",
            judge=CustomJudge(
                "test_log",
                {"log": scorings.path, "key": f"k-{i:02d}", "gate": None if i < 10 else str(gate)},
            ),
        )
        for i in range(40)
    ]
    client = ChalkClient(redis_url)
    batch = client.submit_batch(jobs)
    deadline = time.monotonic() + 60
    while True:  # the first worker scored the ungated jobs and now holds four gated ones
        rows = scorings()
        held = {k for e, k, p in rows if e == "start" and p == first.pid} - {
            k for e, k, _ in rows if e == "end"
        }
        if len(held) == 4:
            break
        assert time.monotonic() < deadline, rows
        time.sleep(0.05)
    os.kill(first.pid, signal.SIGKILL)
    first.proc.wait()
    killed_at = time.monotonic()
    gate.touch()
    second = start_worker(redis_url, concurrency=4)
    results = batch.results(timeout=60)
    assert time.monotonic() - killed_at < 60
    assert all(r.status is JobStatus.SUCCEEDED for r in results)
    ends = Counter(k for e, k, _ in scorings() if e == "end")
    assert ends == {job.id: 1 for job in jobs}  # every job scored to the end exactly once
    by_id = {r.job_id: r for r in results}
    for job_id in held:
        assert by_id[job_id].attempts == 2
        assert by_id[job_id].worker.startswith(second.name)
    assert {r.attempts for r in results if r.job_id not in held} == {1}
    store = redis.Redis.from_url(redis_url)
    assert len(store.keys("chalk:result:k-*")) == 40
    assert store.zcard("chalk:running") == 0
    second.wait_for("re-enqueueing")


@pytest.mark.slow
def test_one_worker_process_holds_64_jobs_at_once(own_redis_url, start_worker):
    start_worker(own_redis_url, concurrency=None)  # chalk worker's defaults
    client = ChalkClient(own_redis_url)
    client.submit_and_wait(ScoringJob(judge=AlwaysPassJudge()), timeout=30)
    jobs = [
        ScoringJob(id=f"wait-{i}", judge=CustomJudge("test_async_sleep", {"sleep_s": 1.5}))
        for i in range(64)
    ]
    started = time.monotonic()
    results = client.submit_batch(jobs).results(timeout=60)
    elapsed = time.monotonic() - started
    assert all(r.status is JobStatus.SUCCEEDED for r in results)
    assert len({r.worker for r in results}) == 1
    assert elapsed < 2.9, f"64 jobs waiting 1.5 s each took {elapsed:.2f} s: not all at once"


@pytest.mark.slow
def test_a_worker_that_cannot_reach_redis_retries_and_says_so(start_worker, tmp_path):
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    worker = start_worker(url, wait=False)
    worker.wait_for("waiting for Redis at", timeout=30)
    server = start_redis(port, tmp_path)
    try:
        worker.wait_for(" ready.", timeout=60)
        result = ChalkClient(url).submit_and_wait(
            ScoringJob(id="after-outage", judge=AlwaysPassJudge()), timeout=30
        )
        assert result.status is JobStatus.SUCCEEDED
    finally:
        stop(server)


@pytest.mark.slow
def test_rabbitmq_as_the_broker(own_redis_url, start_worker):
    redis_url = own_redis_url
    if not wait_port(5672, timeout=0.5):
        need("RabbitMQ on 127.0.0.1:5672")
    broker = "amqp://guest:guest@127.0.0.1:5672//"
    queue = f"chalk-test-{uuid.uuid4().hex[:8]}"
    env = {"CHALK_BROKER_URL": broker, "CHALK_QUEUE": queue}
    worker = start_worker(redis_url, env=env)
    settings = ChalkSettings(broker_url=broker, queue=queue)
    try:
        with ChalkClient(redis_url, settings=settings) as client:
            assert (
                client.submit_and_wait(
                    ScoringJob(id="via-rabbit", judge=AlwaysPassJudge()), timeout=30
                ).status
                is JobStatus.SUCCEEDED
            )
            batch = client.submit_batch(
                [ScoringJob(id=f"rabbit-{i}", judge=AlwaysPassJudge()) for i in range(50)]
            )
            assert [r.job_id for r in batch.results(timeout=60)] == [
                f"rabbit-{i}" for i in range(50)
            ]
        assert not redis.Redis.from_url(redis_url).exists(queue)  # messages went through RabbitMQ
    finally:
        from kombu import Connection

        stop(worker.proc)  # else it declares the queue again
        with Connection(broker) as connection:
            connection.default_channel.queue_delete(queue)


@pytest.mark.slow
def test_chalk_flower_serves_the_cluster(redis_url, shared_worker, tmp_path):
    import subprocess
    import sys

    port = free_port()
    env = {**os.environ, "CHALK_REDIS_URL": redis_url, "FLOWER_UNAUTHENTICATED_API": "true"}
    log = (tmp_path / "flower.log").open("wb")
    flower = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "chalk_client.cli",
            "flower",
            f"--port={port}",
            "--address=127.0.0.1",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        assert wait_port(port, timeout=30), (tmp_path / "flower.log").read_text()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthcheck", timeout=10) as reply:
            assert reply.read() == b"OK"
    finally:
        stop(flower)
        log.close()


def test_chalk_worker_needs_a_redis_url():
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("CHALK_")}
    run = subprocess.run(
        [sys.executable, "-m", "chalk_client.cli", "worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert "CHALK_REDIS_URL" in run.stderr


def test_the_transport_reuses_one_redis_client_per_connection_pool(own_redis_url):
    from kombu import Connection

    with Connection(own_redis_url, transport="chalk_worker.broker.transport:Transport") as conn:
        channel = conn.default_channel
        with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
            assert first is second  # acks and events no longer build a client each
            assert first.ping()
        channel._disconnect_pools()  # what kombu does when the connection is lost
        with channel.conn_or_acquire() as after:
            assert after is not first and after.connection_pool is channel.pool
            assert after.set("reconnected", "yes")
    assert redis.Redis.from_url(own_redis_url).get("reconnected") == b"yes"


def test_stray_entries_are_dropped_and_the_same_worker_goes_on(own_redis_url, start_worker):
    worker = start_worker(own_redis_url, concurrency=2)
    store = redis.Redis.from_url(own_redis_url)
    embed = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}

    def with_properties(**changes: object) -> dict:
        raw = message()
        raw["properties"].update(changes)
        return raw

    # Entries the transport drops, each with the reason it logs.
    dropped = {
        "[1]": "it is a JSON list, not an object",
        "5": "it is a JSON int",
        '"str"': "it is a JSON str",
        "null": "it is a JSON NoneType",
        "true": "it is a JSON bool",
        "not even JSON": "it is not JSON",
        "[" * 100_000: "it cannot be decoded (RecursionError",
        '{"__type__": "datetime", "__value__": "bad"}': "it cannot be decoded (ValueError",
        "{}": "it has no 'properties' object",
        '{"body": "x"}': "it has no 'properties' object",
        '{"properties": {}}': "it has no delivery_tag string",
        **{
            json.dumps(raw): reason
            for raw, reason in [
                ({**message(), "body": "!!!!"}, "its body is not valid base64"),
                ({**message(), "headers": [1]}, "its headers are not an object"),
                ({**message(), "headers": "task"}, "its headers are not an object"),
                ({**message(), "content-type": ["x"]}, "its content-type is not a string"),
                (with_properties(delivery_tag=5), "it has no delivery_tag string"),
                (with_properties(delivery_info=None), "its delivery_info has no exchange"),
                (with_properties(body_encoding="rot13"), "its body_encoding 'rot13' is not"),
                # Well-formed kombu messages that Celery cannot read as a task:
                (message(headers={"task": ["chalk.score"]}), "its 'task' header is not a task"),
                (message(headers={"id": None}), "its 'id' header is not a task id"),
                (message(headers={"id": 5}), "its 'id' header is not a task id"),
                (message(headers={"task": "chalk.unknown", "id": None}), "its 'id' header"),
                (message(headers={"timelimit": 5}), "its 'timelimit' header is not"),
                (message(headers={"stamped_headers": 5}), "its 'stamped_headers' are not"),
                (message(body=5), "its body is not [args, kwargs, embed]"),
                (message(body={}), "its body is not [args, kwargs, embed]"),
                (message(body="x"), "its body is not [args, kwargs, embed]"),
                (message(body=[[], {}]), "its body is not [args, kwargs, embed]"),
                (message(body=["x", {}, embed]), "its body is not [args, kwargs, embed]"),
                (message(body=[["x"], [], embed]), "its body is not [args, kwargs, embed]"),
                (message(body=[["x"], {}, "embed"]), "its body is not [args, kwargs, embed]"),
                ({**message(), "body": ""}, "its body is empty"),
                (message(**{"content-type": "application/data"}), "its content-type is not"),
                (
                    {**message(body={"task": "chalk.score", "args": ["x"]}), "headers": {}},
                    "it is a task message of Celery's protocol 1",
                ),
            ]
        },
    }
    # Entries Celery itself reads, logs and drops.
    celery_drops = {
        json.dumps({**message(), "headers": None}): "Received and deleted unknown message",
        json.dumps(message(headers={"eta": "garbage"})): "Received invalid task message",
        json.dumps(message(headers={"compression": "gzip"})): "Can't decode message body",
        json.dumps({**message(), "body": base64.b64encode(b"\xff").decode()}): "Can't decode",
    }
    entries = [*dropped, *celery_drops]
    store.lpush("chalk", *entries)  # taken in this order

    after = ChalkClient(own_redis_url).submit_and_wait(
        ScoringJob(id="after-strays", judge=AlwaysPassJudge()), timeout=30
    )
    assert after.status is JobStatus.SUCCEEDED
    assert after.worker.endswith(f":{worker.pid}")  # the worker that took every entry
    assert worker.proc.poll() is None
    log = worker.text()
    assert "Unrecoverable error" not in log
    assert "Connection to broker lost" not in log  # which would redeliver what it held
    lines = [line for line in log.splitlines() if "dropped an entry of the queue" in line]
    assert len(lines) == len(dropped)
    for line, reason in zip(lines, dropped.values(), strict=True):
        assert f"that is not a task message: {reason}" in line
        assert len(line) < 600  # one line, the entry shortened
    for reason in celery_drops.values():
        assert reason in log
    assert store.llen("chalk") == 0
    deadline = time.monotonic() + 10
    while held_count(store):  # nothing left held (the last ack follows the result)
        assert time.monotonic() < deadline, held_count(store)
        time.sleep(0.05)


def test_a_malformed_broadcast_is_dropped_and_the_worker_goes_on(own_redis_url, start_worker):
    # Every worker listens to the remote-control channel: one bad PUBLISH must not stop all.
    worker = start_worker(own_redis_url, concurrency=2)
    store = redis.Redis.from_url(own_redis_url)
    channel = f"/{own_redis_url.rsplit('/', 1)[1]}.celery.pidbox"  # kombu's fanout channel
    deadline = time.monotonic() + 30
    while not store.pubsub_numpat():  # the worker listens (kombu subscribes by pattern)
        assert time.monotonic() < deadline, worker.text()
        time.sleep(0.1)
    for bad in ['{"x": 1}', "[1]", "5", json.dumps({**message(), "body": "!!!!"})]:
        store.publish(channel, bad)
    after = ChalkClient(own_redis_url).submit_and_wait(
        ScoringJob(id="after-broadcasts", judge=AlwaysPassJudge()), timeout=30
    )
    assert after.status is JobStatus.SUCCEEDED and after.worker.endswith(f":{worker.pid}")
    assert worker.proc.poll() is None
    # The broadcasts are read on their own channel: the job can be done before all are.
    dropped = "dropped a broadcast on celery.pidbox that is not a message"
    deadline = time.monotonic() + 30
    while worker.text().count(dropped) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    log = worker.text()
    assert "Unrecoverable error" not in log
    assert log.count(dropped) == 4, log
    assert worker.proc.poll() is None


def test_a_root_worker_says_why_running_as_root_is_right(shared_worker):
    if os.geteuid() != 0:
        pytest.skip("the worker runs as root only when started by root")
    log = shared_worker.text()
    note = log.index("chalk worker: running as root, as Chalk intends")
    assert "scripts never run as root" in log[note:]
    # Said before Celery's own warning, which a root worker always prints.
    assert note < log.index("superuser privileges")


def test_celery_s_lines_for_each_task_are_off_unless_asked_for(own_redis_url, start_worker):
    client = ChalkClient(own_redis_url)
    quiet = start_worker(own_redis_url)  # at -l info, as chalk worker starts
    job = client.submit_and_wait(ScoringJob(judge=AlwaysPassJudge()), timeout=30)
    assert job.status is JobStatus.SUCCEEDED
    stop(quiet.proc)
    assert "] received" not in quiet.text() and "succeeded in" not in quiet.text()

    told = start_worker(own_redis_url, env={"CHALK_WORKER_LOG_TASKS": "true"})
    client.submit_and_wait(ScoringJob(judge=AlwaysPassJudge()), timeout=30)
    told.wait_for("] received")
    told.wait_for("succeeded in")
