"""The integrations on a cluster (``redis_url=``): real redis-server, real ``chalk worker``."""

from __future__ import annotations

import asyncio
import logging
import re

import pytest
from processes import free_port
from pydantic import SecretStr

from chalk_client import ChalkClient
from chalk_client.errors import ConfigurationError
from chalk_client.integrations import verl
from chalk_client.integrations.trl import async_reward_function, reward_function
from chalk_client.judges import CustomJudge, RegexJudge


def test_trl_rewards_scored_by_the_cluster_as_one_batch(redis_url, shared_worker):
    reward = reward_function(
        judge=lambda s: RegexJudge([re.escape(s.columns["answer"])]), redis_url=redis_url
    )
    rewards = reward(
        prompts=["q"] * 4,
        completions=["42", "7", None, "x 9"],
        completion_ids=[[1]] * 4,
        answer=["42", "8", "1", "9"],
    )
    assert rewards == [1.0, 0.0, None, 1.0]
    scored = [r for r in reward.last_results if r.worker]
    assert len(scored) == 3 and all(r.worker.startswith(shared_worker.name) for r in scored)
    with ChalkClient(redis_url) as client:  # the results are the cluster's, kept there
        assert client.get(reward.last_results[0].job_id).score == 1.0


def test_the_async_trl_variant_on_the_cluster(redis_url, shared_worker):
    reward = async_reward_function(judge=RegexJudge(["ok"]), redis_url=SecretStr(redis_url))
    rewards = asyncio.run(reward(prompts=["q", "q"], completions=["ok", "no"]))
    assert rewards == [1.0, 0.0]


def test_verl_batches_on_the_cluster(redis_url, shared_worker):
    scores = verl.compute_score_batch(
        ["d", "d", "d"],
        ["#### 1", "#### 2", "#### 4"],
        ["1", "2", "3"],
        [{}, {}, {}],
        judge={"type": "regex", "patterns": ["^#### [12]$"]},
        redis_url=redis_url,
    )
    assert scores == [1.0, 1.0, 0.0]


def test_a_job_the_workers_cannot_score_is_the_failed_value(redis_url, shared_worker):
    # Unknown to the workers: on a cluster that is found out per job, not at construction.
    reward = reward_function(judge=CustomJudge("registered_nowhere"), redis_url=redis_url)
    assert reward(prompts=["q"], completions=["a"]) == [None]
    assert "registered_nowhere" in reward.last_results[0].error


def test_results_not_back_in_time_are_the_failed_value_and_stay_on_the_cluster(
    redis_url, shared_worker, caplog
):
    slow = CustomJudge("test_async_sleep", {"sleep_s": 5})  # registered on the workers
    reward = reward_function(judge=slow, redis_url=redis_url, timeout_s=0.5, failed_value=0.0)
    with caplog.at_level(logging.WARNING, "chalk_client.integrations"):
        assert reward(prompts=["q"], completions=["a"]) == [0.0]
    [result] = reward.last_results
    assert result.status == "failed" and "ResultTimeout" in result.error, result
    assert "could not be scored" in caplog.text


def test_an_unreachable_redis_is_the_failed_value_not_an_exception(caplog):
    reward = reward_function(
        judge=RegexJudge(["x"]), redis_url=f"redis://127.0.0.1:{free_port()}/0", timeout_s=5
    )
    with caplog.at_level(logging.WARNING, "chalk_client.integrations"):
        assert reward(prompts=["q", "q"], completions=["x", "y"]) == [None, None]
    assert "QueueUnavailableError" in reward.last_results[0].error


def test_a_malformed_redis_url_is_refused_when_the_function_is_made():
    with pytest.raises(ConfigurationError, match=r"(?i)redis"):
        reward_function(judge=RegexJudge(["x"]), redis_url="http://not-redis")
