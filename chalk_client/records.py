"""Jobs as the cluster stores them: a record without the submission, and the archive apart.

The archive is stored once per content (by its sha256, as ``Submission.digest``
computes it) and the record names it, so a submission shared by many jobs is
sent and kept once, and nothing large ever passes through the broker.

A record of ``COMPRESS_AT`` bytes or more (a long transcript) is stored
compressed: zlib at its fastest level, behind a two-byte mark that no JSON
text begins with. Transcripts are text and shrink several times, for about
20 microseconds per 10 KB on each side. Redis's scripts never read a record's
content, so nothing else changes.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from chalk_client.errors import InvalidJobError
from chalk_client.jobs import JobResult, Priority, ScoringJob
from chalk_client.submission import Submission

JobLike = ScoringJob | Mapping[str, Any] | str
"""A job as a caller may give it: a ``ScoringJob``, its dict, or its JSON text."""


@dataclass(frozen=True)
class PreparedJob:
    """A validated job, split into what Redis stores."""

    job_id: str
    record: str | bytes
    """The job as JSON, without its submission (``pack_record``: compressed if long)."""
    digest: str
    """The submission archive's sha256, or ``""`` for no submission."""
    archive: bytes | None
    priority: Priority | None = None
    """The job's own priority, if it has one (its batch's otherwise)."""


COMPRESS_AT = 1024
"""Records this long (bytes of JSON) or longer are stored compressed."""
_PACKED = b"\xffz"
"""The mark of a compressed record: 0xff never occurs in UTF-8 text, so in no JSON."""


def pack_record(record: str) -> str | bytes:
    """The record as stored: its JSON, or past ``COMPRESS_AT`` bytes the mark and zlib."""
    data = record.encode()
    if len(data) < COMPRESS_AT:
        return record
    return _PACKED + zlib.compress(data, 1)


def unpack_record(stored: bytes | str) -> bytes | str:
    """A stored record's JSON (``pack_record`` undone); ``InvalidJobError`` if it is damaged."""
    if isinstance(stored, bytes) and stored.startswith(_PACKED):
        try:
            return zlib.decompress(stored[len(_PACKED) :])
        except zlib.error as exc:
            raise InvalidJobError(
                f"the job's record is compressed but damaged ({exc}); submit the job again"
            ) from exc
    return stored


def as_job(job: JobLike) -> ScoringJob:
    """``job`` as a ``ScoringJob``; raises ``InvalidJobError`` with the validation error."""
    try:
        if isinstance(job, ScoringJob):
            return job
        if isinstance(job, str):
            return ScoringJob.model_validate_json(job)
        if isinstance(job, Mapping):
            return ScoringJob.model_validate(dict(job))
    except ValidationError as exc:
        raise InvalidJobError(f"invalid job, refused: {exc}") from exc
    raise InvalidJobError(
        f"a job is a ScoringJob, a dict or JSON text, not {type(job).__name__}; refused"
    )


def prepare_job(job: JobLike) -> PreparedJob:
    """Validate ``job`` (an id is given if it has none) and split it for storage.

    The record is read back here as a worker will read it, so a job that a
    worker could not load is refused now, at the client.
    """
    scoring_job = as_job(job).with_id()
    assert scoring_job.id is not None
    try:
        record = scoring_job.model_dump_json(exclude={"submission", "priority"})
        ScoringJob.model_validate_json(record)
    except (ValidationError, ValueError) as exc:
        raise InvalidJobError(f"invalid job {scoring_job.id!r}, refused: {exc}") from exc
    archive = None if scoring_job.submission is None else scoring_job.submission.archive_bytes()
    digest = "" if archive is None else hashlib.sha256(archive).hexdigest()
    return PreparedJob(scoring_job.id, pack_record(record), digest, archive, scoring_job.priority)


def load_job(record: bytes | str, archive: bytes | None) -> ScoringJob:
    """The job a worker scores, from its record and archive.

    Raises ``ValidationError`` for a record that is not a job, ``InvalidJobError`` for
    a compressed one that cannot be decompressed.
    """
    job = ScoringJob.model_validate_json(unpack_record(record))
    if archive is None:
        return job
    return job.model_copy(update={"submission": Submission(tar=archive)})


def load_result(raw: bytes | str | None) -> JobResult | None:
    """A stored result, or ``None`` for none."""
    return None if raw is None else JobResult.model_validate_json(raw)
