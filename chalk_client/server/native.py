"""Chalk's own API: jobs and batches in, results out (``/v1/...``).

- ``POST /v1/jobs``: a ``ScoringJob`` (``{"job_id"}`` back), a list of them (a batch:
  ``{"batch_id", "job_ids"}`` back, in order), or a ``BatchRequest`` (a batch with its
  options: ``{"jobs": [...], "priority": "high"}``); 202 either way.
- ``GET /v1/jobs/{id}``: its ``JobResult`` once it has one, else
  ``{"job_id", "status": "queued" | "running"}``; 404 for a job not known.
- ``GET /v1/batches/{id}/results``: each result as it finishes, as server-sent
  events (``event: result``, then ``event: end``) or, with ``Accept:
  application/x-ndjson``, one JSON result per line.
- ``DELETE /v1/batches/{id}``: cancel the batch (its unfinished jobs end
  ``cancelled``); what it did back, 404 for a batch not known.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict

from chalk_client.errors import ResultTimeout
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


router = APIRouter(route_class=StrictJSONRoute, prefix="/v1", tags=["Chalk"])


class BatchRequest(BaseModel):
    """A batch with its options."""

    model_config = ConfigDict(extra="forbid")

    jobs: list[ScoringJob]
    priority: Priority = DEFAULT_PRIORITY
    """For the jobs that name none: workers take every ``high`` job waiting before a
    ``normal`` one, and every ``normal`` one before a ``low`` one."""


@router.post("/jobs", status_code=202)
async def submit_jobs(
    request: Request,
    jobs: Annotated[
        ScoringJob | list[ScoringJob] | BatchRequest,
        Body(description="a job, a batch (a list of jobs), or a batch with its options"),
    ],
) -> Response:
    """Queue one job, or a batch of jobs."""
    state = state_of(request)
    priority: Priority = DEFAULT_PRIORITY
    if isinstance(jobs, BatchRequest):
        priority = jobs.priority
        jobs = jobs.jobs
    if isinstance(jobs, ScoringJob):
        job = jobs.with_id()
        check_job(job, state.limits)
        await state.queue.submit([job], None)
        return json_response({"job_id": job.id}, 202)
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
    batch_id = new_batch_id()
    await state.queue.submit(listed, batch_id, priority)
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
