"""Batch callbacks sent by real ``chalk worker`` processes: retried, and delivered once even
when the worker sending one is killed."""

from __future__ import annotations

import itertools
import json
import signal
import time

import pytest
from callback_receiver import CallbackReceiver
from processes import WorkerFactory

from chalk_client import ChalkClient, ChalkSettings, ScoringJob
from chalk_client.callbacks import verify_signature
from chalk_client.cli.cluster import run_status
from chalk_client.cluster.callbacks import CallbackStatus
from chalk_client.judges import AlwaysPassJudge

pytestmark = pytest.mark.slow

SECRET = "worker-secret"
SHORT = {
    "CHALK_CALLBACK_SECRET": SECRET,
    "CHALK_CALLBACK_FIRST_DELAY_S": "0.2",
    "CHALK_CALLBACK_MAX_DELAY_S": "5",
    "CHALK_CALLBACK_TIMEOUT_S": "1.5",
}


def jobs(prefix: str, count: int) -> list[ScoringJob]:
    return [ScoringJob(id=f"{prefix}-{i}", judge=AlwaysPassJudge()) for i in range(count)]


def wait_delivered(client: ChalkClient, batch_id: str, timeout: float = 30):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while (state := client.batch_callback(batch_id)).status is not CallbackStatus.DELIVERED:
        assert time.monotonic() < deadline, state
        time.sleep(0.1)
    return state


def test_a_failing_receiver_gets_one_delivery_after_growing_delays_and_status_shows_it(
    own_redis_url, start_worker: WorkerFactory, monkeypatch, capsys
):
    receiver = CallbackReceiver(answers=[500, 500, 500])
    start_worker(own_redis_url, concurrency=4, env=SHORT)
    try:
        with ChalkClient(own_redis_url, settings=ChalkSettings()) as client:
            batch = client.submit_batch(
                jobs("retried", 3), batch_id="b-retried", callback_url=receiver.url
            )
            batch.wait(60)
            state = wait_delivered(client, batch.id)
        time.sleep(0.5)  # nothing more comes
    finally:
        receiver.close()
    requests = receiver.requests
    assert [r.status for r in requests] == [500, 500, 500, 200]
    assert len(receiver.delivered()) == 1
    assert len({r.headers["x-chalk-delivery"] for r in requests}) == 1
    for request in requests:
        assert verify_signature(request.body, request.headers["x-chalk-signature"], SECRET)
    body = json.loads(requests[-1].body)
    assert body["summary"]["counts"]["succeeded"] == 3 and body["summary"]["mean_score"] == 1.0
    gaps = [b.at - a.at for a, b in itertools.pairwise(requests)]
    assert all(later > earlier for earlier, later in itertools.pairwise(gaps)), gaps
    assert state.attempts == 4
    monkeypatch.setenv("CHALK_REDIS_URL", own_redis_url)
    assert run_status("b-retried") == 0
    shown = capsys.readouterr().out
    assert "batch b-retried: finished, 3/3 done" in shown
    assert "callback: delivered to http://127.0.0.1:" in shown and "after 4 attempts" in shown


def test_a_worker_killed_while_sending_leaves_the_callback_to_another_delivered_once(
    own_redis_url, start_worker: WorkerFactory
):
    receiver = CallbackReceiver()
    receiver.hold.clear()  # the first request hangs: its worker dies while sending
    first = start_worker(own_redis_url, concurrency=4, env=SHORT)
    try:
        with ChalkClient(own_redis_url, settings=ChalkSettings()) as client:
            batch = client.submit_batch(
                jobs("killed", 2), batch_id="b-killed", callback_url=receiver.url
            )
            receiver.wait_for(1)
            first.proc.send_signal(signal.SIGKILL)
            first.proc.wait(10)
            receiver.hold.set()
            assert client.batch_callback(batch.id).status is CallbackStatus.PENDING
            start_worker(own_redis_url, concurrency=4, env=SHORT)
            state = wait_delivered(client, batch.id)
        time.sleep(0.5)
    finally:
        receiver.close()
    assert len(receiver.requests) == 2 and len(receiver.delivered()) == 1
    assert len({r.headers["x-chalk-delivery"] for r in receiver.requests}) == 1
    assert receiver.requests[0].body == receiver.requests[1].body
    assert state.attempts == 1  # the killed try was never recorded
