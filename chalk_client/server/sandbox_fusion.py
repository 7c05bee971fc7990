"""SandboxFusion's ``POST /run_code``, so its clients work with only the URL changed.

The request and response have SandboxFusion's fields and statuses (``RunCodeRequest``,
``RunCodeResponse``): verl's ``sandbox_fusion_url`` reward code and the
``sandbox-fusion`` package post here unchanged. Each call is one Chalk job (a
one-test ``tests`` judge with the output kept); the answer says:

- ``status``: ``Success`` when the program compiled (if it compiles) and ran to
  the end with exit status 0, ``Failed`` otherwise, ``SandboxError`` when the
  system could not run it (no toolchain for the language on the worker, a job
  that failed);
- ``compile_result`` (compiled languages) and ``run_result``: ``status``
  ``Finished`` / ``Error`` / ``TimeLimitExceeded``, ``execution_time`` (wall
  seconds), ``cpu_time``, ``return_code``, ``stdout``, ``stderr``.

``run_timeout`` is both the CPU and the wall-clock limit of the run (SandboxFusion's
is wall-clock); ``memory_limit_MB`` (``-1``: the default, 256 MiB) bounds the
program and all it starts. ``compile_timeout`` is the worker's own
(``CHALK_COMPILE_WALL_S``). ``files`` and ``fetch_files`` are not supported: a
request with any is refused with a 422 saying so.
"""

from __future__ import annotations

from enum import StrEnum

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from chalk_client.errors import ResultTimeout
from chalk_client.program_tests import language_named
from chalk_client.scoring import Verdict
from chalk_client.server.problems import Problem
from chalk_client.server.programs import SOURCE_FILES, ProgramRun, RunOutcome, run_outcome
from chalk_client.server.routing import StrictJSONRoute
from chalk_client.server.state import state_of

LANGUAGES = {
    **{name: name for name in SOURCE_FILES},
    "nodejs": "javascript",
    "python3": "python",
}
"""SandboxFusion's language names (and ours) to the language Chalk runs."""


class CommandRunStatus(StrEnum):
    """How one command (a compile, a run) ended, in SandboxFusion's words."""

    Finished = "Finished"
    Error = "Error"
    TimeLimitExceeded = "TimeLimitExceeded"


class RunStatus(StrEnum):
    """How the whole request went, in SandboxFusion's words."""

    Success = "Success"
    Failed = "Failed"
    SandboxError = "SandboxError"


class CommandRunResult(BaseModel):
    """One command's end, time and output."""

    status: CommandRunStatus
    execution_time: float | None = None
    cpu_time: float | None = None
    return_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None


class RunCodeRequest(BaseModel):
    """SandboxFusion's request: the code, its language, its input and timeouts."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    code: str = Field(description="the program's source")
    language: str = Field(description="python, cpp, c, java, go, rust, nodejs (javascript), bash")
    stdin: str | None = Field(default=None, description="what the program reads on stdin")
    compile_timeout: float = Field(default=10, gt=0, description="(the worker's own applies)")
    run_timeout: float = Field(default=10, gt=0, description="CPU and wall-clock seconds")
    memory_limit_MB: int = Field(default=-1, description="MiB for the program; -1: 256")
    files: dict[str, str | None] = Field(default_factory=dict, description="not supported")
    fetch_files: list[str] = Field(default_factory=list, description="not supported")

    def program(self) -> ProgramRun:
        """The run this request asks for; a ``Problem`` for what Chalk cannot run."""
        language = LANGUAGES.get(str(language_named(self.language)))
        if language is None:
            raise Problem(
                422,
                "unsupported language",
                f"{self.language[:40]!r} is not a language Chalk runs; it runs "
                f"{', '.join(sorted(LANGUAGES))}",
            )
        if self.files or self.fetch_files:
            raise Problem(
                422,
                "files are not supported",
                "Chalk's /run_code runs the code with its stdin only: send no 'files' "
                "or 'fetch_files' (put what the program needs in the code or its stdin)",
            )
        memory = 256 if self.memory_limit_MB <= 0 else self.memory_limit_MB
        return ProgramRun(
            language=language,
            code=self.code,
            stdin=self.stdin or "",
            time_limit_s=self.run_timeout,
            wall_limit_s=self.run_timeout,
            memory_mb=max(memory, 8),
        )


class RunCodeResponse(BaseModel):
    """SandboxFusion's answer: a status, a message, and each command's result."""

    status: RunStatus
    message: str
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = Field(default_factory=dict)


def _compile_result(outcome: RunOutcome) -> CommandRunResult | None:
    built = outcome.compile
    if built is None:
        return None
    timed_out = not built.ok and "took longer than" in built.stderr
    return CommandRunResult(
        status=CommandRunStatus.TimeLimitExceeded if timed_out else CommandRunStatus.Finished,
        execution_time=built.seconds,
        return_code=0 if built.ok else 1,
        stdout="",
        stderr=built.stderr,
    )


def _run_status(verdict: Verdict, exit_code: int | None) -> CommandRunStatus:
    if verdict is Verdict.TIME_LIMIT:
        return CommandRunStatus.TimeLimitExceeded
    if exit_code is None:
        return CommandRunStatus.Error
    return CommandRunStatus.Finished


def run_code_response(outcome: RunOutcome) -> RunCodeResponse:
    """The answer ``/run_code`` gives for one run's outcome."""
    if outcome.problem is not None:
        return RunCodeResponse(status=RunStatus.SandboxError, message=outcome.problem)
    compiled = _compile_result(outcome)
    test = outcome.test
    if test is None or test.verdict is Verdict.COMPILE_ERROR:
        return RunCodeResponse(status=RunStatus.Failed, message="", compile_result=compiled)
    run = CommandRunResult(
        status=_run_status(test.verdict, test.exit_code),
        execution_time=test.wall_s,
        cpu_time=test.cpu_s,
        return_code=test.exit_code,
        stdout=test.stdout or "",
        stderr=test.stderr or "",
    )
    ok = run.status is CommandRunStatus.Finished and run.return_code == 0
    message = "" if ok or test.detail is None else test.detail
    return RunCodeResponse(
        status=RunStatus.Success if ok else RunStatus.Failed,
        message=message,
        compile_result=compiled,
        run_result=run,
    )


router = APIRouter(route_class=StrictJSONRoute, tags=["SandboxFusion-compatible"])


@router.post("/run_code", response_model=RunCodeResponse)
async def run_code(request: Request, run: RunCodeRequest) -> Response:
    """Run the code once on its stdin; how it compiled and ran."""
    state = state_of(request)
    program = run.program()
    program.check(state.limits)
    job = program.job()
    try:
        result = await state.queue.score(job, state.limits.max_wait_s)
    except ResultTimeout:
        raise Problem(
            504,
            "no result in time",
            f"job {job.id} has no result after {state.limits.max_wait_s:g} s "
            "(CHALK_SERVER_MAX_WAIT_S); are workers running?",
            job_id=job.id,
        ) from None
    answer = run_code_response(run_outcome(result))
    return Response(answer.model_dump_json(), media_type="application/json")
