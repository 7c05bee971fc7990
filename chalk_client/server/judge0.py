"""Judge0 CE's API, so Judge0 clients (the ``judge0`` package among them) work unchanged.

``POST /submissions`` (``?base64_encoded=``, ``?wait=``), ``GET
/submissions/{token}``, ``POST /submissions/batch``, ``GET
/submissions/batch?tokens=``, ``GET /languages``, ``/statuses``, ``/about``,
``/config_info``, with Judge0 CE's language and status ids. A submission is
one Chalk job whose id is its token; with ``expected_output`` its one test is
judged as Judge0 judges (each line's trailing spaces and the text's outer
blank lines ignored), without it the run is Accepted when it exits with 0.
``cpu_time_limit`` is the run's CPU limit, ``wall_time_limit`` its wall-clock
one, ``memory_limit`` (KB) its memory; other Judge0 options are ignored, and
``compiler_options`` or ``command_line_arguments`` are refused (422).
"""

from __future__ import annotations

import base64
import binascii
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from chalk_client.errors import ResultTimeout
from chalk_client.jobs import JobResult, JobStatus
from chalk_client.scoring import Verdict
from chalk_client.server import judge0_tables as tables
from chalk_client.server.problems import Problem
from chalk_client.server.programs import ProgramRun, run_outcome
from chalk_client.server.routing import StrictJSONRoute
from chalk_client.server.state import ServerState, json_response, state_of

DEFAULT_FIELDS = (
    "token",
    "stdout",
    "stderr",
    "compile_output",
    "message",
    "status",
    "time",
    "memory",
)
"""What a submission shows when no ``fields`` are asked for (Judge0's default)."""
ALL_FIELDS = (
    *DEFAULT_FIELDS,
    "language_id",
    "exit_code",
    "exit_signal",
    "wall_time",
    "created_at",
    "finished_at",
    "language",
)
"""What ``fields=*`` shows."""
ENCODED = frozenset({"stdout", "stderr", "compile_output"})

SIGNAL_STATUSES = {11: 7, 25: 8, 8: 9, 6: 10}
"""Killed by SIGSEGV, SIGXFSZ, SIGFPE, SIGABRT: Judge0's status for each."""


class Judge0Submission(BaseModel):
    """A Judge0 submission as its clients send it (text, or base64: ``?base64_encoded=true``)."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    source_code: str
    language_id: int
    stdin: str | None = None
    expected_output: str | None = None
    cpu_time_limit: float | None = Field(default=None, gt=0)
    wall_time_limit: float | None = Field(default=None, gt=0)
    memory_limit: float | None = Field(default=None, gt=0, description="KB")
    compiler_options: str | None = None
    command_line_arguments: str | None = None


class Judge0Batch(BaseModel):
    """``POST /submissions/batch``'s body."""

    submissions: list[Judge0Submission] = Field(min_length=1)


def _field_problem(field: str, message: str) -> Problem:
    return Problem(422, f"invalid {field}", f"{field} {message}", **{field: [message]})


def _text(value: str | None, field: str, encoded: bool) -> str | None:
    if value is None or not encoded:
        return value
    try:
        data = base64.b64decode(value.replace("\n", "").replace("\r", ""), validate=True)
    except (binascii.Error, ValueError):
        raise _field_problem(field, "is not valid base64") from None
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise _field_problem(field, "is not UTF-8 text once decoded") from None


def program_of(submission: Judge0Submission, encoded: bool) -> ProgramRun:
    """The run a submission asks for; a ``Problem`` for what Chalk does not run."""
    known = tables.LANGUAGE_IDS.get(submission.language_id)
    if known is None:
        raise _field_problem(
            "language_id",
            f"language with id {submission.language_id} doesn't exist here (GET /languages)",
        )
    for option in ("compiler_options", "command_line_arguments"):
        if getattr(submission, option):
            raise _field_problem(option, "is not allowed on this server (GET /config_info)")
    expected = _text(submission.expected_output, "expected_output", encoded)
    memory_kb = submission.memory_limit or tables.DEFAULT_MEMORY_LIMIT_KB
    return ProgramRun(
        language=known[0],
        code=_text(submission.source_code, "source_code", encoded) or "",
        stdin=_text(submission.stdin, "stdin", encoded) or "",
        expected=expected,
        compare="lines",
        time_limit_s=submission.cpu_time_limit or tables.DEFAULT_CPU_TIME_LIMIT,
        wall_limit_s=submission.wall_time_limit or tables.DEFAULT_WALL_TIME_LIMIT,
        memory_mb=max(8, round(memory_kb / 1024)),
    )


def _status(result: JobResult) -> tuple[int, str | None]:
    """Judge0's status id for a finished job, and its message."""
    outcome = run_outcome(result)
    if outcome.problem is not None:
        return 13, outcome.problem
    test = outcome.test
    if test is None:
        return 13, "the program did not run"
    verdict = test.verdict
    simple = {
        Verdict.ACCEPTED: 3,
        Verdict.WRONG_ANSWER: 4,
        Verdict.PRESENTATION_ERROR: 4,
        Verdict.TIME_LIMIT: 5,
        Verdict.COMPILE_ERROR: 6,
    }
    if verdict in simple:
        return simple[verdict], test.detail
    code = test.exit_code
    if verdict is Verdict.RUNTIME_ERROR and code is not None:
        if code < 0:
            return SIGNAL_STATUSES.get(-code, 12), test.detail
        return 11, test.detail
    return 12, test.detail  # memory or output limit, or no exit status


def _encoded(text: str | None, encoded: bool) -> str | None:
    if text is None or not encoded:
        return text
    return base64.b64encode(text.encode()).decode()


def _view(
    token: str, result: JobResult | None, status: JobStatus | None, encoded: bool
) -> dict[str, Any]:
    """Every field of the submission this server can show."""
    meta = result.metadata.get("judge0", {}) if result is not None else {}
    view: dict[str, Any] = dict.fromkeys(ALL_FIELDS)
    view["token"] = token
    if result is None:
        waiting = 2 if status is JobStatus.RUNNING else 1
        view["status"] = {"id": waiting, "description": tables.STATUSES[waiting]}
        return view
    status_id, message = _status(result)
    outcome = run_outcome(result)
    test = outcome.test
    view["status"] = {"id": status_id, "description": tables.STATUSES[status_id]}
    view["message"] = message
    if isinstance(meta, dict):
        view["language_id"] = meta.get("language_id")
        view["created_at"] = meta.get("created_at")
        language = tables.LANGUAGE_IDS.get(view["language_id"] or -1)
        if language is not None:
            view["language"] = {"id": view["language_id"], "name": language[1]}
    if outcome.compile is not None:
        view["compile_output"] = _encoded(outcome.compile.stderr or None, encoded)
    if test is not None:
        view["stdout"] = _encoded(test.stdout, encoded)
        view["stderr"] = _encoded(test.stderr, encoded)
        if test.cpu_s is not None:
            view["time"] = f"{test.cpu_s:.3f}"
        if test.wall_s is not None:
            view["wall_time"] = f"{test.wall_s:.3f}"
        if test.memory_mb is not None:
            view["memory"] = round(test.memory_mb * 1024)
        code = test.exit_code
        if code is not None and code < 0:
            view["exit_signal"] = -code
        else:
            view["exit_code"] = code
    return view


def _shown(view: dict[str, Any], fields: str | None) -> dict[str, Any]:
    if fields is None or not fields.strip():
        names: tuple[str, ...] = DEFAULT_FIELDS
    elif fields.strip() == "*":
        names = ALL_FIELDS
    else:
        names = tuple(name.strip() for name in fields.split(",") if name.strip())
        unknown = [name for name in names if name not in view]
        if unknown:
            raise Problem(
                422,
                "unknown fields",
                f"this server shows {', '.join(ALL_FIELDS)}; not {', '.join(unknown)}",
            )
    return {name: view[name] for name in names}


def _token_job(state: ServerState, submission: Judge0Submission, encoded: bool) -> Any:
    program = program_of(submission, encoded)
    program.check(state.limits)
    created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    token = str(uuid.uuid4())
    meta = {"judge0": {"language_id": submission.language_id, "created_at": created}}
    return program.job(token, meta)


async def _submission(state: ServerState, token: str, encoded: bool) -> dict[str, Any] | None:
    result = await state.queue.result(token)
    status = None
    if result is None:
        status = await state.queue.status(token)
        if status is None:
            return None
    return _view(token, result, status, encoded)


router = APIRouter(route_class=StrictJSONRoute, tags=["Judge0-compatible"])


@router.post("/submissions", status_code=201)
async def create_submission(
    request: Request,
    submission: Judge0Submission,
    base64_encoded: bool = False,
    wait: bool = False,
    fields: str | None = None,
) -> Response:
    """Run a program; its token (``wait=true``: its result)."""
    state = state_of(request)
    job = _token_job(state, submission, base64_encoded)
    if not wait:
        await state.queue.submit([job], None)
        return json_response({"token": job.id}, 201)
    try:
        result = await state.queue.score(job, state.limits.max_wait_s)
    except ResultTimeout:
        return json_response({"token": job.id}, 201)  # as Judge0: poll with the token
    return json_response(_shown(_view(job.id, result, None, base64_encoded), fields), 201)


@router.post("/submissions/batch", status_code=201)
async def create_batch(
    request: Request, batch: Judge0Batch, base64_encoded: bool = False
) -> Response:
    """Run up to 20 programs; a token for each (or what is wrong with it)."""
    state = state_of(request)
    if len(batch.submissions) > tables.MAX_BATCH:
        raise Problem(
            413,
            "batch too large",
            f"{len(batch.submissions)} submissions; at most {tables.MAX_BATCH} per batch",
        )
    answers: list[dict[str, Any]] = []
    jobs = []
    for submission in batch.submissions:
        try:
            job = _token_job(state, submission, base64_encoded)
        except Problem as problem:
            answers.append(problem.body())
            continue
        jobs.append(job)
        answers.append({"token": job.id})
    if jobs:
        await state.queue.submit(jobs, None if len(jobs) == 1 else _batch_id())
    return json_response(answers, 201)


@router.get("/submissions/batch")
async def get_batch(
    request: Request,
    tokens: Annotated[str, Query(max_length=20_000)],
    base64_encoded: bool = False,
    fields: str | None = None,
) -> Response:
    """Several submissions at once (``null`` for a token this server does not know)."""
    state = state_of(request)
    names = [token.strip() for token in tokens.split(",") if token.strip()]
    if len(names) > tables.MAX_BATCH * 5:
        raise Problem(413, "too many tokens", f"at most {tables.MAX_BATCH * 5} per request")
    shown = []
    for token in names:
        view = await _submission(state, token, base64_encoded)
        shown.append(None if view is None else _shown(view, fields))
    return json_response({"submissions": shown})


@router.get("/submissions/{token}")
async def get_submission(
    request: Request, token: str, base64_encoded: bool = False, fields: str | None = None
) -> Response:
    """One submission: where it stands, or its result."""
    view = await _submission(state_of(request), token, base64_encoded)
    if view is None:
        raise Problem(404, "not found", f"no submission {token!r} here (or it expired)")
    return json_response(_shown(view, fields))


@router.get("/languages")
async def get_languages() -> Response:
    """The languages, by Judge0 CE's ids."""
    return json_response(tables.languages())


@router.get("/languages/{language_id}")
async def get_language(language_id: int) -> Response:
    """One language."""
    known = tables.LANGUAGE_IDS.get(language_id)
    if known is None:
        raise Problem(404, "not found", f"no language with id {language_id} (GET /languages)")
    return json_response({"id": language_id, "name": known[1], "is_archived": False})


@router.get("/statuses")
async def get_statuses() -> Response:
    """Judge0's submission statuses."""
    return json_response(tables.statuses())


@router.get("/about")
async def get_about() -> Response:
    """Which Judge0 this server answers as."""
    return json_response(
        {"version": tables.JUDGE0_VERSION, "homepage": "", "source_code": "", "maintainer": ""}
    )


@router.get("/config_info")
async def get_config_info(request: Request) -> Response:
    """The limits and options, in Judge0's fields."""
    limits = state_of(request).limits
    info = tables.config_info(limits.max_time_limit_s, limits.max_memory_mb, limits.max_wait_s)
    return json_response(info)


def _batch_id() -> str:
    from chalk_client.server.queues import new_batch_id

    return new_batch_id()
