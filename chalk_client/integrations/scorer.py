"""``SampleScorer``: samples in, one Chalk job each, results out, in order.

Every integration is a thin adapter around this: TRL's reward function, verl's
``compute_score`` and inspect's scorer turn what their framework passes into
``Sample`` objects and their results into rewards or scores. What is checked,
and when:

- when the scorer is made: the judge (a JSON judge of unknown ``type`` is an
  ``InvalidJobError``; embedded, also a custom judge or context registered
  nowhere, a command the allowlist refuses, a rubric without an LLM);
- per sample: a completion that is ``None`` or not text nor messages, a row
  value a builder needs that is missing or ``None``, a builder that raises, a
  job that is not valid: that sample alone gets a ``failed`` result saying why,
  logged; the others are scored.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, SecretStr, TypeAdapter, ValidationError

from chalk_client.errors import ChalkError, ConfigurationError, InvalidJobError
from chalk_client.integrations.backends import Backend, Cluster, Embedded, failed_result
from chalk_client.integrations.samples import Sample, default_transcript
from chalk_client.integrations.submissions import SubmissionBuilder
from chalk_client.jobs import JobResult, JobStatus, ScoringJob, Step
from chalk_client.judge_specs import JudgeSpec
from chalk_client.rollouts import DefaultJudge, describe_errors
from chalk_client.settings import ChalkSettings
from chalk_client.transcript import Transcript

log = logging.getLogger("chalk_client.integrations")

JudgeSource = (
    JudgeSpec | Mapping[str, Any] | Sequence[Step | Mapping[str, Any]] | str | os.PathLike[str]
)
"""A judge for every sample: a judge, its JSON object, a list of steps, or a judge file's path."""
JudgeForSample = Callable[[Sample], JudgeSpec | Mapping[str, Any]]
"""A judge made per sample (from the row's reference answer, say)."""
TranscriptBuilder = Callable[[Sample], Transcript]
"""Builds a sample's transcript (default: the prompt, then the completion)."""

DEFAULT_TIMEOUT_S = 3600.0
"""How long a call waits for a cluster's results before counting the rest as failed."""

_judge_adapter: TypeAdapter[JudgeSpec] = TypeAdapter(JudgeSpec)
_steps_adapter: TypeAdapter[list[Step]] = TypeAdapter(list[Step])


def plain_data(value: Any) -> Any:
    """Mappings and sequences as dicts and lists (hydra's ``DictConfig`` and kin, say)."""
    if isinstance(value, Mapping):
        return {str(key): plain_data(item) for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [plain_data(item) for item in value]
    return value


def load_judge(judge: JudgeSource) -> DefaultJudge:
    """``judge`` validated, as one judge or a list of steps; else ``InvalidJobError`` saying why."""
    if isinstance(judge, (str, os.PathLike)):
        return DefaultJudge.from_file(judge)
    try:
        if isinstance(judge, (BaseModel, Mapping)) or not isinstance(judge, Sequence):
            data = judge if isinstance(judge, BaseModel) else plain_data(judge)
            return DefaultJudge(judge=_judge_adapter.validate_python(data))
        if not judge:
            raise InvalidJobError("a judge given as a list of steps needs at least one step")
        return DefaultJudge(steps=_steps_adapter.validate_python(plain_data(judge)))
    except ValidationError as exc:
        raise InvalidJobError(f"not a valid judge: {describe_errors(exc)}") from exc


def _describe(exc: Exception) -> str:
    """An exception on one line: a validation error's problems, or its type and message."""
    if isinstance(exc, ValidationError):
        return describe_errors(exc)
    if isinstance(exc, ChalkError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


class SampleScorer:
    """Scores samples with one Chalk judge, in this process or on a cluster.

    ``judge`` is a ``JudgeSource`` (checked now) or a function of the sample
    (checked per sample). ``submission`` builds each sample's files
    (``CodeBlockSubmission``, ``TextSubmission`` or your own; ``None``: no
    files) and ``transcript`` its transcript (default: the prompt, then the
    completion). ``submission_paths`` become each job's (the files judges get,
    in order). ``columns`` are the row fields every call must carry, with those
    the submission builder names. With ``redis_url`` (text, or a pydantic
    ``SecretStr`` to keep its password out of logs that record arguments) the
    jobs go to that cluster, each call as one batch waited for up to
    ``timeout_s``; without it they are scored here, ``concurrency`` at a time
    (``None``: ``CHALK_EMBEDDED_CONCURRENCY``, or 32), with ``settings``
    (``None``: the ``CHALK_*`` variables). ``source`` names the integration in
    job ids and metadata.
    """

    def __init__(
        self,
        judge: JudgeSource | JudgeForSample,
        *,
        submission: SubmissionBuilder | None = None,
        transcript: TranscriptBuilder | None = None,
        submission_paths: Sequence[str] = (),
        columns: Sequence[str] = (),
        redis_url: str | SecretStr | None = None,
        settings: ChalkSettings | None = None,
        concurrency: int | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        source: str = "chalk",
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be more than 0 seconds, not {timeout_s}")
        self.source = source
        self.submission = submission
        self.transcript = transcript or default_transcript
        self.submission_paths = list(submission_paths)
        self.columns = tuple(dict.fromkeys([*columns, *getattr(submission, "columns", ())]))
        url = redis_url.get_secret_value() if isinstance(redis_url, SecretStr) else redis_url
        self.backend: Backend = (
            Cluster(url, timeout_s, settings) if url else Embedded(settings, concurrency)
        )
        self.judge_for: JudgeForSample | None = None
        self.judge: DefaultJudge | None = None
        if callable(judge) and not isinstance(judge, (BaseModel, Mapping, Sequence)):
            self.judge_for = judge
        else:
            self.judge = load_judge(judge)
            for part in [self.judge.judge] if self.judge.judge else []:
                self.backend.check(part)
            for step in self.judge.steps or []:
                self.backend.check(step.judge)
        try:  # paths that would make every job invalid are refused now
            ScoringJob(judge={"type": "always_pass"}, submission_paths=self.submission_paths)
        except ValidationError as exc:
            raise InvalidJobError(f"submission_paths: {describe_errors(exc)}") from exc

    def check_columns(self, present: Collection[str]) -> None:
        """Raise ``ConfigurationError`` if a column this scorer needs is not ``present``."""
        missing = [name for name in self.columns if name not in present]
        if missing:
            raise ConfigurationError(
                f"{self.source}: the dataset has no column {', '.join(map(repr, missing))} (the "
                f"call carried: {', '.join(sorted(present)) or 'none'}); add it to the dataset, "
                "or make the reward function without it"
            )

    def _job(self, sample: Sample, job_id: str) -> ScoringJob:
        if sample.completion is None:
            raise InvalidJobError("the completion is None: there is nothing to score")
        if self.judge_for is not None:
            judge = load_judge(self.judge_for(sample))
        else:
            assert self.judge is not None
            judge = self.judge
        try:
            return ScoringJob(
                id=job_id,
                transcript=self.transcript(sample),
                judge=judge.judge,
                steps=judge.steps,
                submission=self.submission(sample) if self.submission else None,
                submission_paths=self.submission_paths,
                metadata={"integration": self.source, "sample": sample.index},
            )
        except ValidationError as exc:
            raise InvalidJobError(f"not a valid job: {describe_errors(exc)}") from exc

    def jobs(self, samples: Sequence[Sample]) -> list[ScoringJob | JobResult]:
        """A job per sample, or a ``failed`` result for a sample no job could be made of."""
        call = uuid.uuid4().hex[:16]
        made: list[ScoringJob | JobResult] = []
        for sample in samples:
            job_id = f"{self.source}-{call}-{sample.index}"
            try:
                made.append(self._job(sample, job_id))
            except Exception as exc:
                # The caller's data or builders; one sample's problem, never the batch's.
                log.debug("%s: no job for sample %d", self.source, sample.index, exc_info=True)
                why = _describe(exc)
                made.append(failed_result(job_id, f"no job could be made of the sample: {why}"))
        return made

    @staticmethod
    def _merge(made: list[ScoringJob | JobResult], scored: list[JobResult]) -> list[JobResult]:
        results = iter(scored)
        return [item if isinstance(item, JobResult) else next(results) for item in made]

    def score(
        self, samples: Sequence[Sample], *, concurrency: int | None = None
    ) -> list[JobResult]:
        """Every sample's result, in order; never raises for a sample or a job.

        ``concurrency``, where given, is this call's cap on jobs in flight here
        (in place of the scorer's); a cluster's workers keep their own.
        """
        made = self.jobs(samples)
        jobs = [item for item in made if isinstance(item, ScoringJob)]
        return self._merge(made, self.backend.score(jobs, concurrency) if jobs else [])

    async def score_async(
        self, samples: Sequence[Sample], *, concurrency: int | None = None
    ) -> list[JobResult]:
        """``score`` without blocking the running event loop.

        ``concurrency``, where given, is this call's cap on jobs in flight here
        (in place of the scorer's); a cluster's workers keep their own.
        """
        made = self.jobs(samples)
        jobs = [item for item in made if isinstance(item, ScoringJob)]
        scored = await self.backend.score_async(jobs, concurrency) if jobs else []
        return self._merge(made, scored)


def rewards(
    results: Sequence[JobResult], *, failed_value: float | None, name: str
) -> list[float | None]:
    """Each result's score, ``failed_value`` for those without one; failures are logged.

    One warning per call says how many samples failed and why the first did;
    every failure is logged at debug level.
    """
    failed = [r for r in results if r.status is not JobStatus.SUCCEEDED or r.score is None]
    for result in failed:
        log.debug("%s: job %s failed: %s", name, result.job_id, result.error)
    if failed:
        log.warning(
            "%s: %d of %d samples could not be scored and count as %r; the first: %s",
            name,
            len(failed),
            len(results),
            failed_value,
            failed[0].error,
        )
    return [
        r.score if r.status is JobStatus.SUCCEEDED and r.score is not None else failed_value
        for r in results
    ]
