"""Keys, limits and refusals of ``chalk serve``: each a clear 4xx with a JSON body."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import httpx
import pytest
from servers import ROOT, Server, ServerFactory

pytestmark = pytest.mark.slow

KEY = "sk-test-4c1d5e0f2a"
OTHER = "sk-second-77a1"


def test_keys_are_needed_everywhere_but_health_and_never_logged(
    start_server: ServerFactory,
) -> None:
    server = start_server(key=f"{KEY},{OTHER}")
    url = server.url
    body = {"code": "print(1)", "language": "python"}
    assert httpx.get(f"{url}/health").status_code == 200
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"X-Auth-Token": KEY[:-1]}):
        answer = httpx.post(f"{url}/run_code", json=body, headers=headers)
        assert answer.status_code == 401
        assert "CHALK_API_KEYS" in answer.json()["detail"]
        assert httpx.get(f"{url}/openapi.json", headers=headers).status_code == 401
    for headers in ({"Authorization": f"Bearer {KEY}"}, {"X-Auth-Token": OTHER}):
        answer = httpx.post(f"{url}/run_code", json=body, headers=headers, timeout=60)
        assert answer.status_code == 200, answer.text
    server.proc.terminate()
    server.proc.wait(30)
    log = server.text()
    assert "POST /run_code" in log  # requests are logged...
    assert KEY not in log and OTHER not in log  # ...their keys never


def test_without_keys_it_refuses_to_listen_beyond_loopback() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHALK_")}
    done = subprocess.run(
        [sys.executable, "-m", "chalk_client.cli", "serve", "--host", "0.0.0.0", "--port", "1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "CHALK_API_KEYS" in done.stderr and "0.0.0.0" in done.stderr


def test_limits_on_body_code_stdin_and_time_each_say_which(start_server: ServerFactory) -> None:
    server = start_server(
        env={
            "CHALK_SERVER_MAX_BODY_MB": "1",
            "CHALK_SERVER_MAX_CODE_KB": "4",
            "CHALK_SERVER_MAX_STDIN_MB": "0.01",
            "CHALK_SERVER_MAX_TIME_LIMIT_S": "5",
        }
    )
    with server.client() as client:
        huge = client.post(
            "/run_code",
            content=b'{"code": "' + b"x" * (2 * 1024 * 1024) + b'"}',
            headers={"content-type": "application/json"},
        )
        assert huge.status_code == 413 and "CHALK_SERVER_MAX_BODY_MB" in huge.json()["detail"]
        code = client.post("/run_code", json={"code": "#" * 5000, "language": "python"})
        assert code.status_code == 413 and "CHALK_SERVER_MAX_CODE_KB" in code.json()["detail"]
        stdin = client.post(
            "/run_code", json={"code": "1", "language": "python", "stdin": "1" * 20_000}
        )
        assert stdin.status_code == 413 and "CHALK_SERVER_MAX_STDIN_MB" in stdin.json()["detail"]
        slow = client.post("/run_code", json={"code": "1", "language": "python", "run_timeout": 50})
        assert slow.status_code == 422 and "CHALK_SERVER_MAX_TIME_LIMIT_S" in slow.json()["detail"]
        assert server.alive()


def test_requests_in_flight_per_key_past_the_limit_are_429(start_server: ServerFactory) -> None:
    server = start_server(key=KEY, env={"CHALK_SERVER_MAX_IN_FLIGHT": "2"})
    slow = {"code": "import time\ntime.sleep(3)", "language": "python", "run_timeout": 5}
    answers: list[int] = []

    def post() -> None:
        answers.append(
            httpx.post(
                f"{server.url}/run_code", json=slow, headers=server.headers(), timeout=60
            ).status_code
        )

    threads = [threading.Thread(target=post) for _ in range(2)]
    for thread in threads:
        thread.start()
    time.sleep(1.5)  # both are in flight for three seconds
    refused = httpx.post(f"{server.url}/run_code", json=slow, headers=server.headers())
    for thread in threads:
        thread.join()
    assert refused.status_code == 429
    assert "CHALK_SERVER_MAX_IN_FLIGHT" in refused.json()["detail"]
    assert refused.headers["retry-after"] == "1"
    assert answers == [200, 200]


def test_over_http_a_job_may_not_run_commands_nor_pass_the_servers_limits(
    server: Server,
) -> None:
    transcript = {"messages": [{"role": "assistant", "content": "```python\nprint(1)\n```"}]}
    script = {"type": "executable", "command": ["/bin/sh", "-c", "cat /etc/passwd", "/", "o"]}
    checker = {
        "type": "tests",
        "tests": [{"stdin": "", "stdout": "1"}],
        "compare": {"checker": ["/bin/true"]},
    }
    long = {"type": "tests", "tests": [{"stdin": "", "stdout": "1"}], "time_limit_s": 600}
    with server.client() as client:
        for judge in (script, {"type": "all", "judges": [{"type": "always_pass"}, checker]}):
            answer = client.post("/v1/jobs", json={"transcript": transcript, "judge": judge})
            assert answer.status_code == 403, answer.text
            assert "CHALK_SERVER_ALLOW_COMMANDS" in answer.json()["detail"]
        answer = client.post("/v1/jobs", json=[{"transcript": transcript, "judge": long}])
        assert answer.status_code == 422 and "CHALK_SERVER_MAX_TIME_LIMIT_S" in answer.text


def test_without_keys_only_requests_addressed_to_loopback_are_served(server: Server) -> None:
    body = {"code": "print(1)", "language": "python"}
    rebound = httpx.post(f"{server.url}/run_code", json=body, headers={"Host": "evil.example:80"})
    assert rebound.status_code == 421 and "CHALK_API_KEYS" in rebound.json()["detail"]
    for host in ("localhost:8080", "127.0.0.1", "[::1]:8080"):
        assert httpx.get(f"{server.url}/languages", headers={"Host": host}).status_code == 200
    assert httpx.head(f"{server.url}/health").status_code == 200


def test_a_streamed_body_past_the_limit_is_a_413_and_keys_in_urls_stay_out_of_the_log(
    start_server: ServerFactory,
) -> None:
    server = start_server(key=KEY, env={"CHALK_SERVER_MAX_BODY_MB": "1"})

    def chunks():  # type: ignore[no-untyped-def]
        for _ in range(40):
            yield b" " * 65536

    answer = httpx.post(
        f"{server.url}/run_code",
        content=chunks(),
        headers={**server.headers(), "content-type": "application/json"},
    )
    assert answer.status_code == 413 and "CHALK_SERVER_MAX_BODY_MB" in answer.json()["detail"]
    assert httpx.get(f"{server.url}/languages?api_key={KEY}").status_code == 401
    server.proc.terminate()
    server.proc.wait(30)
    assert "api_key=" in server.text() and KEY not in server.text()
