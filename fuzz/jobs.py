"""Fuzz the job and judge parsers: a job record as a worker reads it, a job and a judge file.

Each input is read four ways: as the record a worker takes from Redis
(``load_job``: a ``ValidationError``, an ``InvalidJobError`` or a job), as the JSON
text a client submits (``as_job``: an ``InvalidJobError`` or a job, the worker's
verdict), as a line of ``chalk score``'s rollouts file (``load_json``, then
``as_job``: it takes what the worker takes, and may take more) and as a ``--judge``
file (``DefaultJudge.from_file``: an ``InvalidJobError`` or a judge). Any other
exception breaks the contract, and so does printing or warning while parsing. A
job read any way must survive the trip to a worker: ``prepare_job`` takes it, and
the record it makes loads as the same job; a judge file's judge fills a rollout
line into a valid job, and its canonical JSON reads back as the same judge.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from chalk_client.errors import InvalidJobError
from chalk_client.jobs import ScoringJob, Step
from chalk_client.judge_specs import JudgeSpec
from chalk_client.records import as_job, load_job, prepare_job
from chalk_client.rollouts import DefaultJudge, load_json
from fuzz.harness import PROJECT, ContractBroken, Target, Unread, main, quiet

_JUDGE: TypeAdapter[JudgeSpec] = TypeAdapter(JudgeSpec)
_STEPS: TypeAdapter[list[Step]] = TypeAdapter(list[Step])
_JUDGE_FD = os.memfd_create("chalk-fuzz-judge")
_JUDGE_FILE = Path(f"/proc/self/fd/{_JUDGE_FD}")
"""The ``--judge`` file: in memory, so that no run leaves one behind."""


def _worker_job(data: bytes) -> ScoringJob | None:
    with quiet("load_job"):
        try:
            return load_job(data, None)
        except (ValidationError, InvalidJobError):
            return None


def _client_job(data: bytes) -> ScoringJob | Unread | None:
    """The job as a client reads the same JSON text (``Unread`` if it is not UTF-8)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return Unread.INPUT
    with quiet("as_job"):
        try:
            return as_job(text)
        except InvalidJobError:
            return None


def _rollout_job(data: bytes) -> ScoringJob | Unread | None:
    """The job as ``chalk score`` reads a rollout line (``Unread`` if it is no JSON object)."""
    try:
        value = load_json(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return Unread.INPUT
    if not isinstance(value, dict):
        return Unread.INPUT
    with quiet("ScoringJob.model_validate"):
        try:
            return as_job(value)
        except InvalidJobError:
            return None


def _comparable(job: ScoringJob) -> dict[str, Any]:
    return job.model_dump(mode="json", exclude={"submission", "priority"})


def _round_trip(job: ScoringJob) -> None:
    """``prepare_job`` takes a loaded job, and its record loads as the same job."""
    try:
        prepared = prepare_job(job)
    except InvalidJobError as exc:
        raise ContractBroken(f"a job the worker loads cannot be submitted: {exc}") from exc
    again = load_job(prepared.record, prepared.archive)
    if _comparable(again) != _comparable(job.model_copy(update={"id": prepared.job_id})):
        raise ContractBroken(f"the record changed the job: {prepared.record!r:.300}")
    if job.submission is not None and (
        again.submission is None or again.submission.tar != job.submission.archive_bytes()
    ):
        raise ContractBroken("the job's archive changed on its way to the worker")


def _judge_file(data: bytes) -> None:
    """``data`` as a ``--judge`` file."""
    os.ftruncate(_JUDGE_FD, 0)
    os.pwrite(_JUDGE_FD, data, 0)
    with quiet("DefaultJudge.from_file"):
        try:
            default = DefaultJudge.from_file(_JUDGE_FILE)
        except InvalidJobError:
            return
    try:
        as_job(default.apply({}))
    except InvalidJobError as exc:
        raise ContractBroken(f"a judge file's judge makes an invalid job: {exc}") from exc
    text = default.canonical
    if default.steps is not None:
        again = DefaultJudge(steps=_STEPS.validate_json(text))
    else:
        again = DefaultJudge(judge=_JUDGE.validate_json(text))
    if again.canonical != default.canonical:
        raise ContractBroken(f"the judge changed through JSON: {default.canonical:.300}")


def check(data: bytes) -> None:
    """Read ``data`` as a worker's record, a client's job, a rollout line and a judge file."""
    job = _worker_job(data)
    if job is not None:
        if not job.scored_steps():
            raise ContractBroken("a job loaded with no step to score")
        _round_trip(job)
    if not data.startswith(b"\xff"):  # a compressed record is the worker's alone
        client = _client_job(data)
        if client is not Unread.INPUT and (client is None) != (job is None):
            raise ContractBroken(f"the client says {client!r:.200}, the worker {job!r:.200}")
        rollout = _rollout_job(data)
        if job is not None and rollout is None:  # (it may take more: its round trip decides)
            raise ContractBroken(f"chalk score refuses what the worker takes: {job!r:.200}")
        if isinstance(rollout, ScoringJob):
            _round_trip(rollout)
    _judge_file(data)


TARGET = Target(
    name="jobs",
    check=check,
    doc=__doc__ or "",
    flags=("-max_len=8192",),
    instrument=(*PROJECT, "re._parser", "re._compiler"),
)

if __name__ == "__main__":
    main(TARGET)
