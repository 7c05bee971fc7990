"""TRL: a Chalk judge as a reward function for ``GRPOTrainer(reward_funcs=...)``.

    from trl import GRPOConfig, GRPOTrainer
    from chalk_client.integrations.submissions import CodeBlockSubmission
    from chalk_client.integrations.trl import reward_function
    from chalk_client.judges import ExecutableJudge

    reward = reward_function(
        judge=ExecutableJudge(["{python}", "-m", "tasks.code_reward.run_tests",
                               "{submission_dir}", "score.json"]),
        submission=CodeBlockSubmission("solution.py", files_from_columns={"tests.py": "tests"}),
    )
    trainer = GRPOTrainer(model=..., reward_funcs=reward, train_dataset=dataset)

TRL calls a reward function with keyword arguments: ``prompts`` and
``completions`` (text, or lists of chat messages), ``completion_ids``, every
other dataset column as a list with one value per completion, and, in recent
versions, ``trainer_state``, ``log_metric`` and ``log_extra``. The reward
function makes one Chalk job per completion, scores them all at once (here,
concurrently, or on a cluster with ``redis_url=``) and returns the scores in
order. A completion that could not be scored (no job could be made of it, or
its job ``failed``) gets ``failed_value``, ``None`` by default: TRL leaves
``None`` out of the reward (it needs TRL 0.16 or later; give ``failed_value=0.0``
for older ones). Failures are logged, and given to TRL's ``log_metric`` as
``<name>/failed`` (the fraction of the batch); nothing is raised mid-training
for a sample. A column the judge or submission needs that the dataset lacks
raises ``ConfigurationError`` at the first call, before anything is scored.
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, Protocol, cast

from pydantic import SecretStr

from chalk_client.integrations.samples import Conversation, Sample
from chalk_client.integrations.scorer import (
    DEFAULT_TIMEOUT_S,
    JudgeForSample,
    JudgeSource,
    SampleScorer,
    TranscriptBuilder,
    rewards,
)
from chalk_client.integrations.submissions import SubmissionBuilder
from chalk_client.jobs import JobResult
from chalk_client.settings import ChalkSettings

DEFAULT_NAME = "chalk_reward"
"""The reward function's ``__name__``: TRL logs its rewards as ``rewards/<name>/mean``."""


def samples_from_call(
    prompts: Sequence[Conversation] | None,
    completions: Sequence[Conversation],
    kwargs: Mapping[str, object],
) -> list[Sample]:
    """One ``Sample`` per completion, as TRL passes them.

    Every keyword argument holding one value per completion (a list as long
    as ``completions``: the dataset columns, ``completion_ids``) is a column
    of the row; the others (``trainer_state``, ``log_metric``) are not.
    """
    count = len(completions)
    if prompts is not None and len(prompts) != count:
        raise ValueError(
            f"TRL passed {len(prompts)} prompts for {count} completions; they must pair up"
        )
    per_row = {
        name: value
        for name, value in kwargs.items()
        if isinstance(value, (list, tuple)) and len(value) == count
    }
    return [
        Sample(
            completion=completion,
            prompt=None if prompts is None else prompts[index],
            columns={name: values[index] for name, values in per_row.items()},
            index=index,
        )
        for index, completion in enumerate(completions)
    ]


class RewardFunction:
    """A TRL reward function: ``(prompts, completions, **kwargs) -> list[float | None]``.

    ``last_results`` holds the ``JobResult`` of every completion of the last
    call, in order (for logging, or to look at why a job failed).
    """

    def __init__(self, scorer: SampleScorer, failed_value: float | None, name: str) -> None:
        self.scorer = scorer
        self.failed_value = failed_value
        self.__name__ = name
        self.last_results: list[JobResult] = []

    def samples(
        self,
        prompts: Sequence[Conversation] | None,
        completions: Sequence[Conversation],
        kwargs: Mapping[str, object],
    ) -> list[Sample]:
        """The call's samples, after checking the row carries every column needed."""
        samples = samples_from_call(prompts, completions, kwargs)
        if samples:
            self.scorer.check_columns(samples[0].columns)
        return samples

    def rewards(self, results: list[JobResult], kwargs: Mapping[str, object]) -> list[float | None]:
        """The scores of ``results``; the failed fraction goes to TRL's ``log_metric``."""
        self.last_results = results
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and results:
            failed = sum(r.score is None for r in results)
            log_metric(f"{self.__name__}/failed", failed / len(results))
        return rewards(results, failed_value=self.failed_value, name=self.__name__)

    def __call__(
        self,
        prompts: Sequence[Conversation] | None = None,
        completions: Sequence[Conversation] = (),
        **kwargs: object,
    ) -> list[float | None]:
        """One reward per completion, in order, as TRL calls reward functions (by keyword)."""
        samples = self.samples(prompts, completions, kwargs)
        return self.rewards(self.scorer.score(samples), kwargs)

    def __repr__(self) -> str:
        return f"RewardFunction({self.__name__!r}, source={self.scorer.source!r})"


def reward_function(
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
    failed_value: float | None = None,
    name: str = DEFAULT_NAME,
) -> RewardFunction:
    """A reward function for ``GRPOTrainer(reward_funcs=...)`` scoring with ``judge``.

    ``judge``: a judge, its JSON object, a list of steps, a judge file's path,
    or a function of the ``Sample`` (``sample.columns["answer"]``...) returning
    a judge. ``submission``: builds each completion's files, e.g.
    ``CodeBlockSubmission("solution.py")``; ``transcript``: builds its
    transcript (default: the prompt, then the completion). ``submission_paths``:
    the files judges get. ``columns``: dataset columns every call must carry
    (those ``submission`` reads are added). ``redis_url``: score on that
    cluster, one batch per call, waiting up to ``timeout_s``; without it, here,
    ``concurrency`` jobs at a time, with ``settings``. ``failed_value``: the
    reward of a completion that could not be scored. ``name``: the function's
    ``__name__``, which TRL logs.

    Raises now, not mid-training: ``InvalidJobError`` for an invalid judge, and
    (scoring here) ``UnknownJudgeError``, ``CommandRefusedError`` or
    ``LLMUnavailableError`` for what every job would fail with.
    """
    scorer = SampleScorer(
        judge,
        submission=submission,
        transcript=transcript,
        submission_paths=submission_paths,
        columns=columns,
        redis_url=redis_url,
        settings=settings,
        concurrency=concurrency,
        timeout_s=timeout_s,
        source="trl",
    )
    return RewardFunction(scorer, failed_value, name)


class AsyncRewardFunction(Protocol):
    """What ``async_reward_function`` returns: an ``async def`` with ``last_results``."""

    __name__: str
    last_results: list[JobResult]
    """The ``JobResult`` of every completion of the last call, in order."""

    def __call__(
        self,
        prompts: Sequence[Conversation] | None = None,
        completions: Sequence[Conversation] = (),
        **kwargs: object,
    ) -> Coroutine[Any, Any, list[float | None]]: ...


def async_reward_function(
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
    failed_value: float | None = None,
    name: str = DEFAULT_NAME,
) -> AsyncRewardFunction:
    """``reward_function`` as an ``async def``, for TRL 0.27 and later.

    TRL awaits coroutine reward functions on an event loop of its own, together
    with its other async reward functions, so Chalk's scoring overlaps theirs.
    The arguments are ``reward_function``'s; the returned function has the same
    ``last_results`` attribute.
    """
    reward = reward_function(
        judge,
        submission=submission,
        transcript=transcript,
        submission_paths=submission_paths,
        columns=columns,
        redis_url=redis_url,
        settings=settings,
        concurrency=concurrency,
        timeout_s=timeout_s,
        failed_value=failed_value,
        name=name,
    )

    async def score(
        prompts: Sequence[Conversation] | None = None,
        completions: Sequence[Conversation] = (),
        **kwargs: object,
    ) -> list[float | None]:
        samples = reward.samples(prompts, completions, kwargs)
        results = reward.rewards(await reward.scorer.score_async(samples), kwargs)
        score.last_results = reward.last_results  # type: ignore[attr-defined]
        return results

    score.__name__ = score.__qualname__ = name
    score.last_results = []  # type: ignore[attr-defined]
    return cast(AsyncRewardFunction, score)
