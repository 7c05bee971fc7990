"""verl: a Chalk judge as verl's custom reward function.

verl (0.7 and later: checked with 0.9.1) reads the function from
``reward.custom_reward_function`` (``path``, ``name``, ``reward_kwargs``) and
passes ``reward_kwargs`` as keyword arguments to every call, so the module's
own functions are configured from YAML alone::

    reward:
      custom_reward_function:
        path: pkg://chalk_client.integrations.verl
        name: compute_score_async
        reward_kwargs:
          judge:
            type: executable
            command: ["{python}", "-m", "tasks.code_reward.run_tests",
                      "{submission_dir}", "out.json"]
          submission:
            type: code_block
            path: solution.py
            files_from_columns: {tests.py: ground_truth}

verl's reward loop scores one response per call, every response of a step at
once on one event loop: ``compute_score_async`` lets it, and gathers the calls
that arrive together into one Chalk batch (``SampleBatcher``).
``compute_score`` is the same as a plain function, which the reward loop runs
in its thread pool, a few at a time. ``compute_score_batch(data_sources,
solution_strs, ground_truths, extra_infos)`` is for verl 0.6 and older (its
``batch`` reward manager, with ``custom_reward_function`` at the top level of
the config).

From Python, ``reward_function(judge=..., ...)`` gives an object whose methods
are these functions (put ``compute_score_async = reward.compute_score_async``
in the file ``custom_reward_function.path`` names).

Each response is a ``Sample`` whose completion is ``solution_str`` and whose
columns are ``extra_info``'s keys, then ``data_source``, ``ground_truth`` and
``extra_info`` itself. A response that could not be scored scores
``failed_value`` (0.0 by default: verl needs a number), and is logged; nothing
is raised for a sample.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import SecretStr

from chalk_client.errors import ConfigurationError
from chalk_client.integrations.batching import SampleBatcher
from chalk_client.integrations.samples import Conversation, Sample
from chalk_client.integrations.scorer import (
    DEFAULT_TIMEOUT_S,
    JudgeForSample,
    JudgeSource,
    SampleScorer,
    TranscriptBuilder,
    plain_data,
    rewards,
)
from chalk_client.integrations.submissions import (
    CodeBlockSubmission,
    SubmissionBuilder,
    TextSubmission,
)
from chalk_client.jobs import JobResult
from chalk_client.settings import ChalkSettings

log = logging.getLogger("chalk_client.integrations")

_VERL_EXTRAS = frozenset({"reward_router_address", "reward_model_tokenizer"})
"""Keyword arguments verl's reward loop adds for reward models; not ours to read."""
_RESPONSE_KEYS = ("data_source", "solution_str", "ground_truth", "extra_info")
"""The keyword arguments of one response, as verl passes them."""


def sample_from(
    index: int,
    data_source: object,
    solution_str: Conversation,
    ground_truth: object,
    extra_info: object,
) -> Sample:
    """One verl response as a ``Sample`` (see the module's docstring for its columns)."""
    extra = dict(extra_info) if isinstance(extra_info, Mapping) else {}
    columns = {
        **extra,
        "data_source": data_source,
        "ground_truth": ground_truth,
        "extra_info": extra_info,
    }
    return Sample(completion=solution_str, columns=columns, index=index)


def _hint_once(key: str, message: str, *args: object) -> None:
    """Log ``message`` as a warning the first time ``key`` comes up in this process."""
    if key not in _hinted:
        _hinted.add(key)
        log.warning(message, *args)


_hinted: set[str] = set()

_VERL_REWARD_LOOP = "verl.experimental.reward_loop"
"""verl's reward loop (0.7 and later), which calls reward functions one response at a time."""


def _in_verl_thread_pool() -> bool:
    """Whether verl's reward loop is running this call in its event loop's thread pool."""
    return _VERL_REWARD_LOOP in sys.modules and threading.current_thread().name.startswith(
        "asyncio_"
    )


class VerlReward:
    """verl's reward functions for one Chalk judge: async, per response, and batched.

    ``concurrency`` caps the jobs in flight of one call of ``compute_score_batch``
    or one gathering of ``compute_score_async`` when scoring here (``None``: all
    of them at once; scoring scripts still run one per core and LLM calls stay
    under ``CHALK_LLM_MAX_IN_FLIGHT``). ``last_results`` holds the
    ``JobResult`` of every response of the last call.
    """

    def __init__(
        self, scorer: SampleScorer, failed_value: float, concurrency: int | None = None
    ) -> None:
        if concurrency is not None and concurrency < 1:
            raise ValueError(f"concurrency must be at least 1 (or None), not {concurrency}")
        self.scorer = scorer
        self.failed_value = failed_value
        self.concurrency = concurrency
        self.last_results: list[JobResult] = []
        self.batcher = SampleBatcher(self._score_gathered)

    async def _score_gathered(self, samples: list[Sample]) -> list[JobResult]:
        limit = self.concurrency or len(samples)
        return await self.scorer.score_async(samples, concurrency=limit)

    def _floats(self, results: list[JobResult]) -> list[float]:
        self.last_results = results
        scores = rewards(results, failed_value=self.failed_value, name="verl")
        return [self.failed_value if score is None else score for score in scores]

    async def compute_score_async(
        self,
        data_source: object,
        solution_str: str,
        ground_truth: object,
        extra_info: Mapping[str, object] | None = None,
        **kwargs: object,
    ) -> float:
        """The score of one response, scored with the calls awaited beside it.

        What verl's reward loop should call: it awaits every response of a step
        at once, and the calls that arrive together go to Chalk as one batch.
        """
        sample = sample_from(0, data_source, solution_str, ground_truth, extra_info)
        return self._floats([await self.batcher.score(sample)])[0]

    def compute_score(
        self,
        data_source: object,
        solution_str: str,
        ground_truth: object,
        extra_info: Mapping[str, object] | None = None,
        **kwargs: object,
    ) -> float:
        """The score of one response, as a plain function (safe from many threads at once)."""
        if _in_verl_thread_pool():
            _hint_once(
                "sync",
                "verl's reward loop runs compute_score in its thread pool, a few responses "
                "at a time; name compute_score_async in reward.custom_reward_function to "
                "score every response of a step at once",
            )
        sample = sample_from(0, data_source, solution_str, ground_truth, extra_info)
        return self._floats(self.scorer.score([sample]))[0]

    def compute_score_batch(
        self,
        data_sources: Sequence[object] | None = None,
        solution_strs: Sequence[str] | None = None,
        ground_truths: Sequence[object] | None = None,
        extra_infos: Sequence[Mapping[str, object] | None] | None = None,
        **kwargs: Any,  # verl's keyword arguments: whatever its version passes
    ) -> list[float] | float:
        """The scores of a batch, in order, scored all at once (verl 0.6's ``batch`` manager).

        Called as verl 0.7 and later call every reward function, with one
        response (``solution_str=...``), it warns that it is not getting batches
        and scores that response.
        """
        if solution_strs is None and "solution_str" in kwargs:
            _hint_once(
                "batch",
                "verl calls compute_score_batch with one response at a time (its reward "
                "loop, in verl 0.7 and later, has no batch manager): scoring each on its "
                "own; name compute_score_async in reward.custom_reward_function to score "
                "a step's responses together",
            )
            sample = sample_from(
                0,
                kwargs.get("data_source"),
                kwargs["solution_str"],
                kwargs.get("ground_truth"),
                kwargs.get("extra_info"),
            )
            return self._floats(self.scorer.score([sample]))[0]
        if data_sources is None or solution_strs is None or ground_truths is None:
            raise TypeError(
                "compute_score_batch needs data_sources, solution_strs and ground_truths, "
                "one value per response each"
            )
        count = len(solution_strs)
        infos = list(extra_infos) if extra_infos is not None else [None] * count
        if not len(data_sources) == len(ground_truths) == len(infos) == count:
            raise ValueError(
                f"verl passed {len(data_sources)} data sources, {count} responses, "
                f"{len(ground_truths)} ground truths and {len(infos)} extra infos; they must "
                "pair up"
            )
        samples = [
            sample_from(index, source, text, truth, info)
            for index, (source, text, truth, info) in enumerate(
                zip(data_sources, solution_strs, ground_truths, infos, strict=True)
            )
        ]
        results = self.scorer.score(samples, concurrency=self.concurrency or len(samples))
        return self._floats(results)


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
    failed_value: float = 0.0,
) -> VerlReward:
    """verl's reward functions (``compute_score`` and kin) scoring with ``judge``.

    ``judge``: a judge, its JSON object, a list of steps, a judge file's path,
    or a function of the ``Sample`` returning a judge (``sample.columns
    ["ground_truth"]``...). ``submission`` builds each response's files (e.g.
    ``CodeBlockSubmission("solution.py", files_from_columns={"tests.py":
    "ground_truth"})``), ``transcript`` its transcript (default: the response as
    one assistant message); ``submission_paths`` are the files judges get;
    ``columns`` the fields every response must carry. ``redis_url``: score on
    that cluster, waiting up to ``timeout_s`` per call; without it, here,
    ``concurrency`` jobs at a time, with ``settings``. A response that could
    not be scored scores ``failed_value``.

    Raises now what every job would fail with: ``InvalidJobError`` for an
    invalid judge, and (scoring here) ``UnknownJudgeError``,
    ``CommandRefusedError`` or ``LLMUnavailableError``.
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
        source="verl",
    )
    return VerlReward(scorer, failed_value, concurrency)


def _submission_from(spec: object) -> SubmissionBuilder | None:
    """A submission builder from its config: ``{type: code_block | text, path, ...}``."""
    if spec is None:
        return None
    if not isinstance(spec, Mapping) or spec.get("type") not in ("code_block", "text"):
        raise ConfigurationError(
            "reward_kwargs.submission must be a mapping with type code_block or text, e.g. "
            f"{{type: code_block, path: solution.py}}; got {spec!r:.80}"
        )
    fields = {str(key): value for key, value in spec.items() if key != "type"}
    fields["files_from_columns"] = dict(fields.get("files_from_columns") or {})
    try:
        if spec["type"] == "code_block":
            return CodeBlockSubmission(**fields)
        return TextSubmission(**fields)
    except TypeError as exc:
        raise ConfigurationError(f"reward_kwargs.submission: {exc}") from exc


_configured: dict[str, VerlReward] = {}
_configured_lock = threading.Lock()
_warned: set[str] = set()

_OPTIONS = frozenset(
    {"judge", "submission", "submission_paths", "redis_url", "concurrency", "timeout_s"}
    | {"failed_value"}
)


def configured(options: Mapping[str, object]) -> VerlReward:
    """The ``VerlReward`` that ``reward_kwargs`` describe, made once per distinct set.

    Options: ``judge`` (required: a judge object, a list of steps, or a judge
    file's path), ``submission`` (``{type: code_block | text, path,
    language, files_from_columns}``), ``submission_paths``, ``redis_url``,
    ``concurrency``, ``timeout_s``, ``failed_value``. Raises
    ``ConfigurationError`` (or ``InvalidJobError`` for the judge) at the first
    call when they are wrong.
    """
    known = {key: plain_data(value) for key, value in options.items() if key in _OPTIONS}
    for key in sorted(set(options) - _OPTIONS - _VERL_EXTRAS - _warned):
        _warned.add(key)
        log.warning("verl reward_kwargs: %r is not a Chalk option; ignored", key)
    key = json.dumps(known, sort_keys=True, default=repr)
    with _configured_lock:
        found = _configured.get(key)
        if found is None:
            if known.get("judge") is None:
                raise ConfigurationError(
                    "chalk_client.integrations.verl needs a judge: set "
                    "reward.custom_reward_function.reward_kwargs.judge to a judge object (e.g. "
                    '{type: regex, patterns: ["42"]}) or a judge file\'s path'
                )
            found = _configured[key] = reward_function(
                known["judge"],
                submission=_submission_from(known.get("submission")),
                submission_paths=list(known.get("submission_paths") or ()),
                redis_url=known.get("redis_url"),
                concurrency=known.get("concurrency"),
                timeout_s=float(known.get("timeout_s", DEFAULT_TIMEOUT_S)),
                failed_value=float(known.get("failed_value", 0.0)),
            )
    return found


def compute_score(
    data_source: object,
    solution_str: str,
    ground_truth: object,
    extra_info: Mapping[str, object] | None = None,
    **reward_kwargs: object,
) -> float:
    """The score of one response as a plain function, configured by ``reward_kwargs``.

    verl's reward loop runs it in its thread pool, a few at a time:
    ``compute_score_async`` scores a step's responses together. The options
    are ``configured``'s.
    """
    reward = configured(reward_kwargs)
    return reward.compute_score(data_source, solution_str, ground_truth, extra_info)


async def compute_score_async(
    data_source: object,
    solution_str: str,
    ground_truth: object,
    extra_info: Mapping[str, object] | None = None,
    **reward_kwargs: object,
) -> float:
    """The score of one response, configured by ``reward_kwargs``: what verl should call.

    verl's reward loop awaits a step's responses at once; those that arrive
    together are scored as one batch. The options are ``configured``'s.
    """
    reward = configured(reward_kwargs)
    return await reward.compute_score_async(data_source, solution_str, ground_truth, extra_info)


def compute_score_batch(
    data_sources: Sequence[object] | None = None,
    solution_strs: Sequence[str] | None = None,
    ground_truths: Sequence[object] | None = None,
    extra_infos: Sequence[Mapping[str, object] | None] | None = None,
    **reward_kwargs: object,
) -> list[float] | float:
    """The scores of a batch, configured by ``reward_kwargs`` (verl 0.6's ``batch`` manager).

    Called with one response, as verl 0.7 and later call reward functions, it
    warns and scores that response. The options are ``configured``'s.
    """
    response = {name: reward_kwargs.pop(name) for name in _RESPONSE_KEYS if name in reward_kwargs}
    reward = configured(reward_kwargs)
    return reward.compute_score_batch(
        data_sources, solution_strs, ground_truths, extra_infos, **response
    )
