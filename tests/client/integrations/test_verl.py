"""verl's custom reward functions, called exactly as verl's reward managers call them.

These tests need no verl (``test_verl_trainer.py`` runs verl's own reward
loop): they follow its loader and managers
(``verl.trainer.ppo.reward.get_custom_reward_fn``, ``NaiveRewardManager``,
``BatchRewardManager``, the reward loop): the function is looked up by name in
the module ``custom_reward_function.path`` names (``pkg://...`` imports it),
wrapped so that ``reward_kwargs`` are merged into each call's keyword
arguments, and called by keyword, per response (from many threads at once in
the reward loop, or awaited if it is a coroutine function) or per batch (lists
in, with ``data_sources`` a numpy array as verl keeps it).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
import sys
import threading
import types
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import pytest

from chalk_client.errors import ConfigurationError, InvalidJobError
from chalk_client.integrations import verl
from chalk_client.integrations.verl import reward_function
from chalk_client.judges import RegexJudge, RubricJudge
from chalk_worker.testing.fake_openai import FakeOpenAI, Seen


def _call_with_kwargs(raw_fn, extra_kwargs, *args, **kwargs):
    """verl's wrapper: ``reward_kwargs`` from the config win over the call's."""
    return raw_fn(*args, **{**kwargs, **extra_kwargs})


async def _call_with_kwargs_async(raw_fn, extra_kwargs, *args, **kwargs):
    return await raw_fn(*args, **{**kwargs, **extra_kwargs})


def load_custom_reward_fn(path: str, name: str, reward_kwargs: Mapping[str, Any]) -> Any:
    """What verl's ``get_custom_reward_fn`` does with ``custom_reward_function``'s config."""
    assert path.startswith("pkg://")
    module = importlib.import_module(path.removeprefix("pkg://").replace("/", "."))
    raw_fn = getattr(module, name)
    wrapper = _call_with_kwargs_async if inspect.iscoroutinefunction(raw_fn) else _call_with_kwargs
    return partial(wrapper, raw_fn, dict(reward_kwargs))


class DictConfig(Mapping[str, Any]):
    """A stand-in for hydra's ``DictConfig``: a Mapping, not a dict."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Any:
        value = self._data[key]
        return DictConfig(value) if isinstance(value, dict) else value

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


EQUALS_TRUTH = {"type": "custom", "name": "final_message_contains", "params": {"expected": "#"}}


def test_the_naive_manager_s_call_scores_one_response():
    reward = reward_function(judge=lambda s: RegexJudge([f"#### {s.columns['ground_truth']}$"]))
    score = reward.compute_score(
        data_source="openai/gsm8k",
        solution_str="6 times 7 is 42.\n#### 42",
        ground_truth="42",
        extra_info={"split": "train", "index": 0},
    )
    assert score == 1.0 and isinstance(score, float)
    assert reward.compute_score("openai/gsm8k", "#### 41", "42") == 0.0


def test_the_batch_manager_s_call_scores_a_batch_in_order():
    numpy = pytest.importorskip("numpy")
    reward = reward_function(judge=lambda s: RegexJudge([f"#### {s.columns['ground_truth']}$"]))
    scores = reward.compute_score_batch(
        data_sources=numpy.array(["gsm8k"] * 4, dtype=object),
        solution_strs=["#### 1", "#### 3", "#### 3", "no answer"],
        ground_truths=["1", "2", "3", "4"],
        extra_infos=[{"index": n} for n in range(4)],
    )
    assert scores == [1.0, 0.0, 1.0, 0.0]
    assert [r.status for r in reward.last_results] == ["succeeded"] * 4


def test_extra_info_s_keys_are_columns_of_the_sample():
    reward = reward_function(judge=lambda s: RegexJudge([s.columns["expected"]]))
    assert reward.compute_score("src", "the answer", None, {"expected": "answer"}) == 1.0


def test_the_module_s_own_functions_are_configured_by_reward_kwargs():
    config = DictConfig({"judge": {"type": "regex", "patterns": ["^#### 42$"]}})
    compute_score = load_custom_reward_fn(
        "pkg://chalk_client.integrations.verl", "compute_score", config
    )
    assert compute_score(data_source="d", solution_str="#### 42", ground_truth="42") == 1.0
    assert (
        compute_score(data_source="d", solution_str="#### 7", ground_truth="42", extra_info={})
        == 0.0
    )
    batch = load_custom_reward_fn(
        "pkg://chalk_client.integrations.verl", "compute_score_batch", config
    )
    assert batch(
        data_sources=["d", "d"],
        solution_strs=["#### 42", "x"],
        ground_truths=["42", "42"],
        extra_infos=[{}, {}],
    ) == [1.0, 0.0]
    # The same options are one reward object, made once.
    assert verl.configured(config) is verl.configured(dict(config))


def test_the_reward_loop_calls_from_many_threads_at_once():
    with FakeOpenAI(latency_s=0.05) as fake:
        reward = reward_function(
            judge=RubricJudge(rubric=[{"criterion": "correct (met)"}]), settings=fake.settings()
        )

        def one(n: int) -> float:
            return reward.compute_score(
                data_source="d", solution_str=f"answer {n}", ground_truth=str(n), extra_info={}
            )

        with ThreadPoolExecutor(32) as threads:
            scores = list(threads.map(one, range(64)))
    assert scores == [1.0] * 64
    assert fake.calls == 64
    assert len(fake.connections) <= 64  # one shared client, not one per call


def test_the_reward_loop_awaits_the_async_function():
    config = {"judge": {"type": "regex", "patterns": ["42"]}}
    compute_score = load_custom_reward_fn(
        "pkg://chalk_client.integrations.verl", "compute_score_async", config
    )
    assert inspect.iscoroutinefunction(verl.compute_score_async)

    async def reward_loop() -> list[float]:
        return list(
            await asyncio.gather(
                *(
                    compute_score(data_source="d", solution_str=text, ground_truth="42")
                    for text in ("42", "41", "the 42nd")
                )
            )
        )

    assert asyncio.run(reward_loop()) == [1.0, 0.0, 1.0]


def test_a_response_that_cannot_be_scored_scores_the_failed_value(caplog):
    reward = reward_function(judge=RegexJudge(["42"]))
    with caplog.at_level(logging.WARNING, "chalk_client.integrations"):
        assert reward.compute_score_batch(["d", "d"], [None, "42"], ["1", "2"]) == [0.0, 1.0]
    assert "1 of 2 samples could not be scored and count as 0.0" in caplog.text
    minus = reward_function(judge=RegexJudge(["42"]), failed_value=-1.0)
    assert minus.compute_score("d", None, "1") == -1.0  # type: ignore[arg-type]


def test_a_failed_job_scores_the_failed_value_and_training_goes_on():
    reward = reward_function(judge=lambda s: EQUALS_TRUTH | {"name": "not_registered"})
    assert reward.compute_score("d", "x", "y") == 0.0
    assert "not_registered" in reward.last_results[0].error


def test_lists_that_do_not_pair_up_are_refused():
    reward = reward_function(judge=RegexJudge(["x"]))
    with pytest.raises(ValueError, match="must pair up"):
        reward.compute_score_batch(["d"], ["a", "b"], ["1", "2"])


def test_wrong_reward_kwargs_say_what_to_set(caplog):
    with pytest.raises(ConfigurationError, match=r"reward_kwargs\.judge"):
        verl.compute_score("d", "x", "y")
    with pytest.raises(InvalidJobError, match="not a valid judge"):
        verl.compute_score("d", "x", "y", judge={"type": "nope"})
    with pytest.raises(ConfigurationError, match="type code_block or text"):
        verl.compute_score("d", "x", "y", judge={"type": "always_pass"}, submission={"path": "a"})
    with pytest.raises(ConfigurationError, match=r"reward_kwargs\.submission"):
        verl.compute_score(
            "d",
            "x",
            "y",
            judge={"type": "always_pass"},
            submission={"type": "text", "paht": "a.txt"},
        )
    with caplog.at_level(logging.WARNING, "chalk_client.integrations"):
        score = verl.compute_score(
            "d", "x", "y", judge={"type": "always_pass"}, failed_valeu=0.5, reward_router_address=1
        )
    assert score == 1.0
    assert "'failed_valeu' is not a Chalk option" in caplog.text
    assert "reward_router_address" not in caplog.text


def test_a_configured_submission_puts_the_ground_truth_beside_the_response():
    judge = {
        "type": "executable",
        "command": [
            "{python}",
            "-c",
            "import json, pathlib, sys; d = pathlib.Path(sys.argv[1]); "
            "same = d.joinpath('answer.txt').read_text() == d.joinpath('truth.txt').read_text(); "
            "out = {'score': float(same), 'metadata': {}}; "
            "pathlib.Path(sys.argv[2]).write_text(json.dumps(out))",
            "{submission_dir}",
            "out.json",
        ],
    }
    scores = verl.compute_score_batch(
        ["d", "d"],
        ["42", "41"],
        ["42", "42"],
        [{}, {}],
        judge=judge,
        submission={"type": "text", "files_from_columns": {"truth.txt": "ground_truth"}},
    )
    assert scores == [1.0, 0.0]


def test_the_prime_manager_s_process_pool_runs_the_module_s_function():
    from concurrent.futures import ProcessPoolExecutor

    config = {"judge": {"type": "regex", "patterns": ["^#### 42$"]}}
    compute_score = load_custom_reward_fn(
        "pkg://chalk_client.integrations.verl", "compute_score", config
    )
    # verl's prime manager: partial(evaluation_func, task, completion, reference, extra_info)
    # run in a ProcessPoolExecutor, so the function travels pickled.
    with ProcessPoolExecutor(max_workers=2) as pool:
        futures = [
            pool.submit(partial(compute_score, "gsm8k", text, "42", {"index": n}))
            for n, text in enumerate(["#### 42", "#### 41", "#### 42"])
        ]
        assert [f.result(timeout=120) for f in futures] == [1.0, 0.0, 1.0]


def test_the_reward_loop_s_concurrent_async_calls_go_to_chalk_as_one_batch():
    reward = reward_function(judge=lambda s: RegexJudge([f"#### {s.columns['ground_truth']}$"]))

    async def reward_loop() -> list[float]:
        # verl's RewardLoopWorker: a task per response, gathered on one event loop.
        return list(
            await asyncio.gather(
                *(
                    reward.compute_score_async(
                        data_source="d", solution_str=f"#### {n % 3}", ground_truth=str(n % 2)
                    )
                    for n in range(40)
                )
            )
        )

    scores = asyncio.run(reward_loop())
    assert scores == [1.0 if n % 3 == n % 2 else 0.0 for n in range(40)]
    assert reward.batcher.batch_sizes == [40]


def test_gathered_calls_are_all_in_flight_at_once_unless_concurrency_says_otherwise():
    def in_flight(concurrency: int | None) -> int:
        everyone = threading.Event()

        def hold_until_all_48_arrive(seen: Seen) -> None:
            # Replies wait (a few seconds at most) for the rest, so that a loaded
            # machine starting the calls slowly cannot make them look sequential.
            if fake.in_flight >= 48:
                everyone.set()
            everyone.wait(timeout=5 if concurrency is None else 0.1)

        with FakeOpenAI(answer=hold_until_all_48_arrive) as fake:
            reward = reward_function(
                judge=RubricJudge(rubric=[{"criterion": "correct (met)"}]),
                settings=fake.settings(),
                concurrency=concurrency,
            )

            async def reward_loop() -> list[float]:
                calls = (reward.compute_score_async("d", f"answer {n}", "x", {}) for n in range(48))
                return list(await asyncio.gather(*calls))

            assert asyncio.run(reward_loop()) == [1.0] * 48
            return fake.max_in_flight

    assert in_flight(None) == 48  # more than the embedded queue's 32 a call
    assert in_flight(4) <= 4


def test_the_batch_function_called_per_response_warns_and_scores_that_response(caplog):
    # verl 0.7 and later call every reward function so, whatever its name.
    config = {"judge": {"type": "regex", "patterns": ["^#### 42$"]}}
    batch = load_custom_reward_fn(
        "pkg://chalk_client.integrations.verl", "compute_score_batch", config
    )
    verl._hinted.discard("batch")
    with caplog.at_level(logging.WARNING, "chalk_client.integrations"):
        scores = [
            batch(data_source="d", solution_str=text, ground_truth="42", extra_info={})
            for text in ("#### 42", "#### 41", "#### 42")
        ]
    assert scores == [1.0, 0.0, 1.0]
    warnings = [r.getMessage() for r in caplog.records if "compute_score_batch" in r.getMessage()]
    assert len(warnings) == 1 and "compute_score_async" in warnings[0]
    assert "not a Chalk option" not in caplog.text  # the response's keys are not options
    with pytest.raises(TypeError, match="needs data_sources"):
        verl.compute_score_batch(judge=config["judge"])


def test_the_plain_function_run_in_verl_s_thread_pool_suggests_the_async_one(caplog, monkeypatch):
    # verl's NaiveRewardManager runs a plain function with loop.run_in_executor(None, ...).
    monkeypatch.setitem(sys.modules, "verl.experimental.reward_loop", types.ModuleType("stub"))
    verl._hinted.discard("sync")
    reward = reward_function(judge=RegexJudge(["42"]))

    async def naive_manager() -> list[float]:
        loop = asyncio.get_running_loop()
        return [
            await loop.run_in_executor(None, partial(reward.compute_score, "d", text, "42"))
            for text in ("42", "41")
        ]

    with caplog.at_level(logging.WARNING, "chalk_client.integrations"):
        assert asyncio.run(naive_manager()) == [1.0, 0.0]
        assert reward.compute_score("d", "42", "42") == 1.0  # not in verl's pool: no word
    hints = [r.getMessage() for r in caplog.records if "thread pool" in r.getMessage()]
    assert len(hints) == 1 and "compute_score_async" in hints[0]
