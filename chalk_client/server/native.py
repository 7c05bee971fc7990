"""Chalk's own API: jobs and batches in, results out (``/v1/...``).

- ``POST /v1/jobs``: a ``ScoringJob`` (``{"job_id"}`` back) or a list of them, a
  batch (``{"batch_id", "job_ids"}`` back, in order); 202 either way. A batch
  with options is an object, ``{"jobs": [...], "priority": "high", "callback_url":
  URL}`` (a ``JobBatch``): its priority, and where the workers ``POST`` the batch's
  summary once every job has a result (a cluster only; a URL the operator's
  ``CHALK_CALLBACK_ALLOW`` does not allow is refused here, 403).
- ``GET /v1/jobs/{id}``: its ``JobResult`` once it has one, else
  ``{"job_id", "status": "queued" | "running"}``; 404 for a job not known.
- ``GET /v1/batches/{id}/results``: each result as it finishes, as server-sent
  events (``event: result``, then ``event: end``) or, with ``Accept:
  application/x-ndjson``, one JSON result per line.
- ``DELETE /v1/batches/{id}``: cancel the batch (its unfinished jobs end
  ``cancelled``); what it did back, 404 for a batch not known.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from chalk_client.callback_allowlist import CallbackAllowlist, check_target
from chalk_client.errors import CallbackRefusedError, InvalidCallbackError, ResultTimeout
from chalk_client.jobs import DEFAULT_PRIORITY, Priority, ScoringJob
from chalk_client.server.policy import check_job
from chalk_client.server.problems import Problem
from chalk_client.server.queues import new_batch_id
from chalk_client.server.routing import StrictJSONRoute
from chalk_client.server.state import ServerState, json_response, state_of

NDJSON = "application/x-ndjson"


async def _sse(
    state: ServerState, batch_id: str, job_ids: list[str], timeout: float, ndjson: bool
) -> AsyncIterator[bytes]:
    done = 0
    total = len(dict.fromkeys(job_ids))
    ending: dict[str, Any] = {"batch_id": batch_id, "total": total}
    try:
        async for result in state.queue.stream(batch_id, job_ids, timeout):
            done += 1
            data = result.model_dump_json()
            yield (data + "\n").encode() if ndjson else f"event: result\ndata: {data}\n\n".encode()
    except ResultTimeout as exc:
        ending["timeout"] = str(exc)
    ending["done"] = done
    if not ndjson:
        yield f"event: end\ndata: {json.dumps(ending)}\n\n".encode()


class JobBatch(BaseModel):
    """A batch with options: its jobs, and where to call back once every job has a result."""

    model_config = ConfigDict(extra="forbid")

    jobs: list[ScoringJob] = Field(description="The batch's jobs, in order.")
    priority: Priority = Field(
        default=DEFAULT_PRIORITY,
        description=(
            "For the jobs that name none: workers take every high job waiting before a "
            "normal one, and every normal one before a low one; batches of one priority "
            "take turns."
        ),
    )
    callback_url: str | None = Field(
        default=None,
        description=(
            "Where the workers POST the batch's summary once every job has a result (http or "
            "https): JSON with delivery_id, batch_id and summary, signed with the header "
            "X-Chalk-Signature: sha256=HMAC-SHA256(body, CHALK_CALLBACK_SECRET). Retried with "
            "backoff until a 2xx or a day after the batch finished; one delivery id per "
            "batch, to de-duplicate by. Only to hosts the operator allows "
            "(CHALK_CALLBACK_ALLOW); needs a cluster."
        ),
    )


def _body_kind(body: Any) -> str:
    if isinstance(body, list):
        return "list"
    return "batch" if isinstance(body, dict) and "jobs" in body else "job"


Jobs = Annotated[
    Annotated[ScoringJob, Tag("job")]
    | Annotated[list[ScoringJob], Tag("list")]
    | Annotated[JobBatch, Tag("batch")],
    Discriminator(_body_kind),
]
"""What ``POST /v1/jobs`` takes: a job, a list of jobs, or a batch object (``JobBatch``)."""


async def _check_callback(state: ServerState, url: str) -> None:
    """Refuse (422, 403) a callback URL the workers would not send to; resolves its host."""
    if state.queue.where != "cluster":
        raise Problem(
            422,
            "callbacks need a cluster",
            "this server scores in its own process, which sends no callbacks: run it with "
            "CHALK_REDIS_URL (and workers), or stream the results from "
            "GET /v1/batches/{id}/results",
        )
    allowlist = CallbackAllowlist.parse(state.settings.callback_allow)
    try:
        await asyncio.to_thread(check_target, url, allowlist)
    except InvalidCallbackError as exc:
        raise Problem(422, "invalid callback_url", str(exc)) from None
    except CallbackRefusedError as exc:
        raise Problem(403, "callback_url not allowed", str(exc)) from None
    except OSError as exc:
        raise Problem(
            422, "callback_url unreachable", f"its host cannot be resolved: {exc}"
        ) from None


router = APIRouter(route_class=StrictJSONRoute, prefix="/v1", tags=["Chalk"])


@router.post("/jobs", status_code=202)
async def submit_jobs(
    request: Request,
    body: Annotated[
        Jobs,
        Body(
            description="a job; a batch: a list of jobs, or an object with its jobs and "
            "options (priority, callback_url)"
        ),
    ],
) -> Response:
    """Queue one job, or a batch of jobs (a list, or a ``JobBatch`` with its options)."""
    state = state_of(request)
    if isinstance(body, ScoringJob):
        job = body.with_id()
        check_job(job, state.limits)
        await state.queue.submit([job], None)
        return json_response({"job_id": job.id}, 202)
    jobs, priority, callback_url = (
        (body.jobs, body.priority, body.callback_url)
        if isinstance(body, JobBatch)
        else (body, DEFAULT_PRIORITY, None)
    )
    if not jobs:
        raise Problem(422, "empty batch", "send at least one job")
    if len(jobs) > state.limits.max_batch:
        raise Problem(
            413,
            "batch too large",
            f"{len(jobs)} jobs; at most {state.limits.max_batch} per request "
            "(CHALK_SERVER_MAX_BATCH): send it in parts",
        )
    listed = [job.with_id() for job in jobs]
    for job in listed:
        check_job(job, state.limits)
    if callback_url is not None:
        await _check_callback(state, callback_url)
    batch_id = new_batch_id()
    await state.queue.submit(listed, batch_id, priority, callback_url)
    return json_response({"batch_id": batch_id, "job_ids": [j.id for j in listed]}, 202)


@router.get("/jobs/{job_id}")
async def get_job(request: Request, job_id: str) -> Response:
    """The job's result, or where it stands."""
    state = state_of(request)
    result = await state.queue.result(job_id)
    if result is not None:
        return Response(result.model_dump_json(), media_type="application/json")
    status = await state.queue.status(job_id)
    if status is None:
        raise Problem(404, "not found", f"no job {job_id!r} here (never submitted, or expired)")
    return json_response({"job_id": job_id, "status": status.value})


@router.get(
    "/batches/{batch_id}/results",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}, NDJSON: {}}}},
)
async def stream_results(
    request: Request,
    batch_id: str,
    timeout: Annotated[float | None, Query(gt=0, description="seconds")] = None,
) -> StreamingResponse:
    """Each result of the batch as it finishes: server-sent events, or NDJSON."""
    state = state_of(request)
    job_ids = await state.queue.batch_jobs(batch_id)
    if job_ids is None:
        raise Problem(404, "not found", f"no batch {batch_id!r} here (or it expired)")
    ndjson = NDJSON in request.headers.get("accept", "")
    wait = min(timeout or state.limits.max_wait_s, 24 * 3600.0)
    return StreamingResponse(
        _sse(state, batch_id, job_ids, wait, ndjson),
        media_type=NDJSON if ndjson else "text/event-stream",
        headers={"cache-control": "no-cache"},
    )


@router.delete("/batches/{batch_id}")
async def cancel_batch(request: Request, batch_id: str) -> Response:
    """Cancel the batch: its jobs that have not started never will, those running are
    stopped; each ends ``cancelled``. Results already written stay."""
    report = await state_of(request).queue.cancel(batch_id)
    if report is None:
        raise Problem(404, "not found", f"no batch {batch_id!r} here (or it expired)")
    return json_response(
        {
            "batch_id": batch_id,
            "cancelled": report.cancelled,
            "jobs": {outcome.value: count for outcome, count in report.outcomes.items()},
            "message": report.render(),
        }
    )
