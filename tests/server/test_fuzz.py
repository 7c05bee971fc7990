"""Whatever a client sends, the server answers: property-based tests of every endpoint.

Hypothesis throws malformed bodies at each route: JSON of any shape, valid
requests with one field replaced by anything, bytes that are not UTF-8, huge
strings, odd query strings and content types. Every answer must be a JSON
body with a status below 500; the app runs in this process (Starlette's test
client re-raises anything the app let escape) in front of a queue that
records jobs instead of running them, so thousands of cases take seconds.
A real server then takes a sample of the same inputs and still answers.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servers import Server
from starlette.testclient import TestClient

from chalk_client.cluster.cancel import CancelReport
from chalk_client.jobs import JobResult, JobStatus, Priority, ScoringJob
from chalk_client.server.app import create_app
from chalk_client.server.settings import ServerSettings
from chalk_client.settings import ChalkSettings


class RecordingQueue:
    """Takes jobs and answers at once that they failed (nothing runs in these tests)."""

    where = "embedded"

    def __init__(self) -> None:
        self.jobs: dict[str, ScoringJob] = {}

    async def submit(
        self,
        jobs: Sequence[ScoringJob],
        batch_id: str | None,
        priority: Priority = "normal",
        callback_url: str | None = None,
    ) -> None:
        for job in jobs:
            assert job.id is not None
            self.jobs[job.id] = job

    async def cancel(self, batch_id: str) -> CancelReport | None:
        return None

    async def score(self, job: ScoringJob, timeout: float) -> JobResult:
        await self.submit([job], None)
        return JobResult(job_id=job.id or "", status=JobStatus.FAILED, error="not run here")

    async def result(self, job_id: str) -> JobResult | None:
        if job_id in self.jobs:
            return JobResult(job_id=job_id, status=JobStatus.FAILED, error="not run here")
        return None

    async def status(self, job_id: str) -> JobStatus | None:
        return JobStatus.FAILED if job_id in self.jobs else None

    async def batch_jobs(self, batch_id: str) -> list[str] | None:
        return None

    async def stream(
        self, batch_id: str, job_ids: list[str], timeout: float
    ) -> AsyncIterator[JobResult]:
        for job_id in job_ids:
            yield JobResult(job_id=job_id, status=JobStatus.FAILED, error="not run here")

    def warm(self) -> None:
        pass

    async def health(self) -> dict[str, Any]:
        return {"queue": "embedded", "ok": True}

    async def close(self) -> None:
        pass


LIMITS = ServerSettings(max_body_mb=1, max_code_kb=64, max_in_flight=1000)
CLIENT = TestClient(
    create_app(ChalkSettings(), LIMITS, RecordingQueue()), base_url="http://127.0.0.1"
)

VALID = {
    ("POST", "/run_code"): {
        "code": "print(1)",
        "language": "python",
        "stdin": "",
        "run_timeout": 1,
    },
    ("POST", "/submissions"): {"source_code": "print(1)", "language_id": 71, "stdin": "x"},
    ("POST", "/submissions/batch"): {"submissions": [{"source_code": "1", "language_id": 71}]},
    ("POST", "/v1/jobs"): {
        "transcript": {"messages": [{"role": "assistant", "content": "hi"}]},
        "judge": {"type": "regex", "patterns": ["hi"]},
    },
}
GETS = [
    "/submissions/batch",
    "/submissions/x",
    "/v1/jobs/x",
    "/v1/batches/x/results",
    "/languages",
    "/languages/71",
    "/statuses",
    "/about",
    "/config_info",
    "/health",
    "/openapi.json",
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=50),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5)
    ),
    max_leaves=20,
)
odd_numbers = st.sampled_from([0, -1, 1e308, -1e308, 2**63, -(2**63), 10**40, 0.0001])
odd_text = st.sampled_from(["", "\x00", "é" * 1000, "a" * 70_000, "\ud800", "😀", "%%%", "=="])
anything = json_values | odd_numbers | odd_text


def _answered(response: Any) -> None:
    assert response.status_code < 500, (response.status_code, response.text[:500])
    if response.headers.get("content-type", "").startswith("application/json"):
        json.loads(response.content)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, str, Any]:
    (method, path), body = draw(st.sampled_from(list(VALID.items())))
    body = json.loads(json.dumps(body))
    target = body["submissions"][0] if "submissions" in body else body
    key = draw(st.sampled_from([*target.keys(), "extra_field"]))
    target[key] = draw(anything)
    return method, path, body


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=mutated(),
    query=st.sampled_from(
        [
            "",
            "?base64_encoded=true",
            "?wait=true",
            "?wait=maybe",
            "?base64_encoded=1&wait=true&fields=*",
            "?fields=nope",
        ]
    ),
)
def test_a_valid_request_with_any_one_field_wrong_is_answered(
    case: tuple[str, str, Any], query: str
) -> None:
    method, path, body = case
    content = json.dumps(body, ensure_ascii=False).encode("utf-8", errors="surrogatepass")
    _answered(
        CLIENT.request(
            method, path + query, content=content, headers={"content-type": "application/json"}
        )
    )


@settings(max_examples=300, deadline=None)
@given(
    path=st.sampled_from([path for _, path in VALID] + ["/v1/batches/x", "/nowhere"]),
    body=st.binary(max_size=2000) | json_values.map(lambda v: json.dumps(v).encode()),
    content_type=st.sampled_from(
        ["application/json", "text/plain", "application/x-www-form-urlencoded", ""]
    ),
)
def test_any_bytes_posted_anywhere_are_answered(path: str, body: bytes, content_type: str) -> None:
    headers = {"content-type": content_type} if content_type else {}
    _answered(CLIENT.post(path, content=body, headers=headers))


@settings(max_examples=200, deadline=None)
@given(path=st.sampled_from(GETS), query=st.text(max_size=200))
def test_any_query_string_is_answered(path: str, query: str) -> None:
    _answered(
        CLIENT.get(
            path,
            params={"tokens": query, "fields": query, "base64_encoded": query, "timeout": query},
        )
    )


@pytest.mark.slow
def test_a_real_server_still_answers_after_hostile_bodies(server: Server) -> None:
    hostile = [
        b"\xff\xfe\x00garbage",
        b'{"code": "\\ud800", "language": "python"}',
        b'{"transcript": {"messages": [{"role": "assistant", "content": "\\udfff"}]}, '
        b'"judge": {"type": "regex", "patterns": ["x"]}}',
        b'{"code": 1e999, "language": "python"}',
        b"[" * 10_000 + b"]" * 10_000,
        b'{"source_code": "' + b"A" * 1_000_000 + b'", "language_id": 71}',
        json.dumps({"submissions": [{"source_code": "1", "language_id": 71}] * 500}).encode(),
        json.dumps([VALID[("POST", "/v1/jobs")]] * 3 + [{"judge": None}]).encode(),
    ]
    with server.client() as client:
        for path in ("/run_code", "/submissions", "/submissions/batch", "/v1/jobs"):
            for body in hostile:
                answer = client.post(
                    path, content=body, headers={"content-type": "application/json"}
                )
                assert 400 <= answer.status_code < 500, (
                    path,
                    body[:50],
                    answer.status_code,
                    answer.text[:300],
                )
                assert "error" in answer.json()
        assert client.get("/health").status_code == 200
        assert server.alive()
