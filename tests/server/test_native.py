"""Chalk's own HTTP API (``/v1``), against a real ``chalk serve``: the embedded queue, and
the cluster behind two servers at once."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from callback_receiver import CallbackReceiver
from processes import WorkerFactory
from servers import Server, ServerFactory

from chalk_client.callbacks import verify_signature

pytestmark = pytest.mark.slow

REGEX_JOB: dict[str, Any] = {
    "transcript": {"messages": [{"role": "assistant", "content": "the answer is 42"}]},
    "judge": {"type": "regex", "patterns": ["answer is 42"]},
}
TESTS_JOB: dict[str, Any] = {
    "transcript": {
        "messages": [
            {
                "role": "assistant",
                "content": "```python\nprint(sum(map(int, input().split())))\n```",
            }
        ]
    },
    "judge": {"type": "tests", "language": "python", "tests": [{"stdin": "1 2", "stdout": "3"}]},
}


def _result(client: httpx.Client, job_id: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        answer = client.get(f"/v1/jobs/{job_id}")
        assert answer.status_code == 200, answer.text
        body = answer.json()
        if body["status"] in ("succeeded", "failed", "cancelled"):
            return body
        assert body["status"] in ("queued", "running")
        assert time.monotonic() < deadline, body
        time.sleep(0.05)


def test_a_job_posted_is_scored_and_its_result_fetched(server: Server) -> None:
    with server.client() as client:
        answer = client.post("/v1/jobs", json={**REGEX_JOB, "id": "native-one"})
        assert answer.status_code == 202
        assert answer.json() == {"job_id": "native-one"}
        result = _result(client, "native-one")
        assert result["status"] == "succeeded"
        assert result["scoring"]["score"] == 1.0
        assert client.get("/v1/jobs/never-sent").status_code == 404


def test_a_batch_streams_as_server_sent_events_and_as_ndjson(server: Server) -> None:
    jobs = [TESTS_JOB, REGEX_JOB, {**REGEX_JOB, "judge": {"type": "regex", "patterns": ["no"]}}]
    with server.client() as client:
        answer = client.post("/v1/jobs", json=jobs)
        assert answer.status_code == 202
        batch = answer.json()
        assert len(batch["job_ids"]) == 3
        url = f"/v1/batches/{batch['batch_id']}/results"
        with client.stream("GET", url) as events:
            assert events.headers["content-type"].startswith("text/event-stream")
            text = events.read().decode()
        blocks = [block for block in text.split("\n\n") if block.strip()]
        results = [
            json.loads(b.split("data: ", 1)[1]) for b in blocks if b.startswith("event: result")
        ]
        assert sorted(r["job_id"] for r in results) == sorted(batch["job_ids"])
        assert blocks[-1].startswith("event: end")
        assert json.loads(blocks[-1].split("data: ", 1)[1])["done"] == 3
        scores = {r["job_id"]: r["scoring"]["score"] for r in results}
        assert [scores[i] for i in batch["job_ids"]] == [1.0, 1.0, 0.0]
        lines = client.get(url, headers={"Accept": "application/x-ndjson"})
        assert lines.headers["content-type"].startswith("application/x-ndjson")
        assert len([json.loads(line) for line in lines.text.splitlines()]) == 3


def test_a_bad_job_is_a_422_saying_where(server: Server) -> None:
    with server.client() as client:
        answer = client.post("/v1/jobs", json={"transcript": {}, "judge": {"type": "nope"}})
        assert answer.status_code == 422
        body = answer.json()
        assert body["error"] == "invalid request"
        assert "judge" in body["detail"]
        assert client.post("/v1/jobs", json=[]).status_code == 422
        assert client.get("/v1/batches/b-none/results").status_code == 404


def test_a_batch_object_takes_options_and_the_embedded_queue_refuses_a_callback(
    server: Server,
) -> None:
    with server.client() as client:
        answer = client.post("/v1/jobs", json={"jobs": [REGEX_JOB]})
        assert answer.status_code == 202 and len(answer.json()["job_ids"]) == 1
        refused = client.post(
            "/v1/jobs", json={"jobs": [REGEX_JOB], "callback_url": "http://127.0.0.1:9/hook"}
        )
        assert refused.status_code == 422
        assert refused.json()["error"] == "callbacks need a cluster"
        spec = client.get("/openapi.json").json()
        assert "callback_url" in spec["components"]["schemas"]["JobBatch"]["properties"]


def test_a_batch_posted_with_a_callback_url_is_called_back(
    start_server: ServerFactory,
    start_worker: WorkerFactory,
    own_redis_url: str,
    callback_receiver: CallbackReceiver,
) -> None:
    start_worker(own_redis_url, concurrency=4, env={"CHALK_CALLBACK_SECRET": "api-secret"})
    server = start_server(env={"CHALK_REDIS_URL": own_redis_url})
    with server.client() as client:
        for url, status, error in (
            ("http://10.1.2.3/hook", 403, "callback_url not allowed"),
            ("ftp://127.0.0.1/hook", 422, "invalid callback_url"),
        ):
            refused = client.post("/v1/jobs", json={"jobs": [REGEX_JOB], "callback_url": url})
            assert (refused.status_code, refused.json()["error"]) == (status, error)
        answer = client.post(
            "/v1/jobs", json={"jobs": [REGEX_JOB, TESTS_JOB], "callback_url": callback_receiver.url}
        )
        assert answer.status_code == 202
        batch = answer.json()
    (request,) = callback_receiver.wait_for(1, timeout=60)
    assert verify_signature(request.body, request.headers["x-chalk-signature"], "api-secret")
    body = json.loads(request.body)
    assert body["batch_id"] == batch["batch_id"]
    assert body["summary"]["counts"]["succeeded"] == 2 and body["summary"]["mean_score"] == 1.0


def test_openapi_and_docs_are_served(server: Server) -> None:
    with server.client() as client:
        spec = client.get("/openapi.json").json()
        for path in ("/v1/jobs", "/run_code", "/submissions", "/submissions/batch", "/health"):
            assert path in spec["paths"], path
        assert client.get("/docs").status_code == 200
        health = client.get("/health").json()
        assert health["ok"] is True and health["queue"] == "embedded"


def test_two_servers_on_one_cluster_answer_for_each_others_jobs(
    start_server: ServerFactory, start_worker: WorkerFactory, redis_url: str
) -> None:
    start_worker(redis_url, concurrency=4)
    env = {"CHALK_REDIS_URL": redis_url}
    first, second = start_server(env=env), start_server(env=env)
    with first.client() as one, second.client() as two:
        assert one.get("/health").json()["queue"] == "cluster"
        batch = one.post("/v1/jobs", json=[REGEX_JOB, TESTS_JOB]).json()
        lines = two.get(
            f"/v1/batches/{batch['batch_id']}/results", headers={"Accept": "application/x-ndjson"}
        ).text.splitlines()
        assert sorted(json.loads(line)["job_id"] for line in lines) == sorted(batch["job_ids"])
        for job_id in batch["job_ids"]:
            assert _result(two, job_id)["status"] == "succeeded"
        answer = two.post("/run_code", json={"code": "print(6*7)", "language": "python"}).json()
        assert answer["status"] == "Success" and answer["run_result"]["stdout"] == "42\n"
        token = one.post("/submissions", json={"source_code": "print(1)", "language_id": 71}).json()
        deadline = time.monotonic() + 60
        while (seen := two.get(f"/submissions/{token['token']}").json())["status"]["id"] < 3:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert seen["status"]["id"] == 3 and seen["stdout"] == "1\n"


def test_a_stopped_server_leaves_no_job_folder_nor_mount(start_server: ServerFactory) -> None:
    # A process that died earlier may have left its own, under a PID the server now has.
    earlier = set(Path("/proc/mounts").read_text().splitlines())
    left = set(Path(tempfile.gettempdir()).iterdir())
    server = start_server(env={"CHALK_SERVER_ALLOW_COMMANDS": "true"})
    script = {
        "transcript": {"messages": [{"role": "assistant", "content": "hi"}]},
        "judge": {"type": "executable", "command": ["{python}", "-c", "open('o', 'w')", "o"]},
    }
    with server.client() as client:
        job_id = client.post("/v1/jobs", json=script).json()["job_id"]
        assert _result(client, job_id)["status"] == "succeeded"
        slow = {**TESTS_JOB, "id": "cut-short"}
        slow["judge"] = {**TESTS_JOB["judge"], "tests": [{"stdin": "1 2", "stdout": "3"}] * 50}
        client.post("/v1/jobs", json=slow)
    pid = server.proc.pid
    server.proc.terminate()  # SIGTERM: uvicorn ends on it, without running atexit
    assert server.proc.wait(30) is not None
    mine = f"chalk-job-{pid}-"
    mounts = set(Path("/proc/mounts").read_text().splitlines()) - earlier
    assert not [line for line in mounts if mine in line]
    folders = set(Path(tempfile.gettempdir()).iterdir()) - left
    assert not [p for p in folders if p.name.startswith(mine)]


def test_the_embedded_queue_forgets_its_oldest_results_past_its_memory() -> None:
    import asyncio

    from chalk_client import ScoringJob
    from chalk_client.server.queues import EmbeddedQueue
    from chalk_client.settings import ChalkSettings

    async def scenario() -> list[bool]:
        queue = EmbeddedQueue(ChalkSettings(), keep=1000, keep_bytes=3000)
        ids = []
        for number in range(10):
            job = ScoringJob.model_validate({**REGEX_JOB, "id": f"kept-{number}"})
            await queue.score(job, 60)
            ids.append(job.id)
        found = [await queue.result(job_id) is not None for job_id in ids]
        await queue.close()
        return found

    found = asyncio.run(scenario())
    assert found[-1] and not found[0]  # the newest kept, the oldest forgotten
    assert sum(found) <= 5


def _slow_tests_job(seconds: int) -> dict[str, Any]:
    """A tests-judge job whose program sleeps ``seconds`` (its only test)."""
    code = f"```python\nimport time\ntime.sleep({seconds})\nprint(1)\n```"
    return {
        "transcript": {"messages": [{"role": "assistant", "content": code}]},
        "judge": {
            "type": "tests",
            "language": "python",
            "time_limit_s": seconds * 2,
            "wall_limit_s": seconds * 2,
            "tests": [{"stdin": "", "stdout": "1"}],
        },
    }


def _cancel_on(client: httpx.Client) -> None:
    """Post a batch of slow programs, cancel it while they run: every job ends cancelled, the
    stream of results ends, and the server goes on scoring."""
    batch = client.post("/v1/jobs", json={"jobs": [_slow_tests_job(20)] * 6, "priority": "low"})
    assert batch.status_code == 202, batch.text
    ids = batch.json()["job_ids"]
    batch_id = batch.json()["batch_id"]
    deadline = time.monotonic() + 30
    while client.get(f"/v1/jobs/{ids[0]}").json()["status"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    started = time.monotonic()
    answer = client.delete(f"/v1/batches/{batch_id}")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["cancelled"] == 6 and body["jobs"]["running"] >= 1, body
    lines = client.get(
        f"/v1/batches/{batch_id}/results", headers={"Accept": "application/x-ndjson"}
    ).text.splitlines()
    assert {json.loads(line)["status"] for line in lines} == {"cancelled"}
    assert len(lines) == 6 and time.monotonic() - started < 10
    assert _result(client, client.post("/v1/jobs", json=REGEX_JOB).json()["job_id"])["status"] == (
        "succeeded"
    )
    again = client.delete(f"/v1/batches/{batch_id}").json()
    assert again["cancelled"] == 0 and "nothing to cancel" in again["message"]
    missing = client.delete("/v1/batches/b-never")
    assert missing.status_code == 404 and missing.json()["error"] == "not found"


def test_a_batch_is_cancelled_over_http_embedded(server: Server) -> None:
    with server.client() as client:
        _cancel_on(client)


def test_a_batch_is_cancelled_over_http_on_the_cluster(
    start_server: ServerFactory, start_worker: WorkerFactory, redis_url: str
) -> None:
    start_worker(redis_url, concurrency=4)
    with start_server(env={"CHALK_REDIS_URL": redis_url}).client() as client:
        _cancel_on(client)
        bad = client.post("/v1/jobs", json={"jobs": [REGEX_JOB], "priority": "urgent"})
        assert bad.status_code == 422 and "priority" in bad.json()["detail"]
