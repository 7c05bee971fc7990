"""What a job posted over HTTP may ask for: no commands unless the operator allows them,
and no limits past the server's.

A key holder is not an operator. An ``executable`` judge runs a command of the
job's choosing (sandboxed, but seeing the host paths it names, read-only), and
so does a ``tests`` judge's checker; over HTTP both are refused unless
``CHALK_SERVER_ALLOW_COMMANDS`` is on (the workers' ``CHALK_ALLOWED_COMMANDS``
still applies then). Custom judges are the operator's own code, registered on
the workers, and stay allowed. A ``tests`` judge may not ask for more time or
memory than the server's limits give a ``/run_code`` request.
"""

from __future__ import annotations

from collections.abc import Iterator

from chalk_client.jobs import ScoringJob
from chalk_client.judge_specs import AllJudge, AnyJudge, ExecutableJudge, JudgeSpec, TestsJudge
from chalk_client.program_tests import Checker
from chalk_client.server.problems import Problem
from chalk_client.server.settings import ServerSettings


def _parts(judge: JudgeSpec) -> Iterator[JudgeSpec]:
    yield judge
    if isinstance(judge, (AllJudge, AnyJudge)):
        for part in judge.judges:
            yield from _parts(part)


def _runs_a_command(judge: JudgeSpec) -> str | None:
    if isinstance(judge, ExecutableJudge):
        return "an executable judge"
    if isinstance(judge, TestsJudge) and isinstance(judge.compare, Checker):
        return "a tests judge with a checker command"
    return None


def check_job(job: ScoringJob, limits: ServerSettings) -> None:
    """Raise a ``Problem`` (403 or 422) for what this server does not run for a key holder."""
    for step in job.scored_steps():
        for judge in _parts(step.judge):
            command = _runs_a_command(judge)
            if command is not None and not limits.allow_commands:
                raise Problem(
                    403,
                    "commands not allowed over HTTP",
                    f"job {job.id!r} asks for {command}: a command of the job's choosing, "
                    "which this server does not run for API keys. The operator may allow it "
                    "(CHALK_SERVER_ALLOW_COMMANDS=true, with CHALK_ALLOWED_COMMANDS on the "
                    "workers); tests, regex and rubric judges need nothing",
                )
            if isinstance(judge, TestsJudge):
                _check_tests(job, judge, limits)


def _check_tests(job: ScoringJob, judge: TestsJudge, limits: ServerSettings) -> None:
    for name, seconds in (
        ("time_limit_s", judge.time_limit_s),
        ("wall_limit_s", judge.wall_limit_s),
    ):
        if seconds is not None and seconds > limits.max_time_limit_s:
            raise Problem(
                422,
                f"{name} too long",
                f"job {job.id!r} asks for {seconds:g} s; this server allows at most "
                f"{limits.max_time_limit_s:g} s (CHALK_SERVER_MAX_TIME_LIMIT_S)",
            )
    if judge.memory_limit_mb > limits.max_memory_mb:
        raise Problem(
            422,
            "memory limit too large",
            f"job {job.id!r} asks for {judge.memory_limit_mb} MiB; this server allows at most "
            f"{limits.max_memory_mb} MiB (CHALK_SERVER_MAX_MEMORY_MB)",
        )
