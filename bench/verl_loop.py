"""verl's own reward loop on the CPU, scoring with whatever reward function its config names.

What verl's trainer (0.7 and later) does with its config, minus the models:
the config is composed by Hydra, from verl's ``ppo_trainer`` with overrides
or from a config file of the user's that extends it; a local Ray starts; the
trainer's ``RewardLoopManager`` makes its reward workers (Ray actors), each
loading the custom reward function and the reward manager the config names;
``compute_rm_score`` scores a batch of decoded responses (a ``DataProto`` of
token ids, as the rollout leaves it). Nothing here is Chalk's: the docs'
verl test (``tests/client/integrations/test_verl_trainer.py``) and ``bench.verl_reward``
use it to see what verl itself makes of a configuration.

Needs verl and what its config and reward modules import, not its GPU stack::

    pip install --no-deps "verl==0.9.1" && pip install -r bench/verl-requirements.txt

Run as a command, it prints one JSON object: the function and manager verl
loaded, the reward function's config, each row's score and each round's
seconds (``--rounds 0`` only loads)::

    python -m bench.verl_loop [--config-file chalk_ppo.yaml] [--rounds 1] [--workers 2]
                              ROWS.json [OVERRIDE ...]

``ROWS.json`` is a list of ``{"response", "ground_truth", "data_source",
"extra_info"}`` objects.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PROMPT_TOKENS = 4
"""Every row's prompt: this many padding tokens (the reward loop only measures it)."""


def make_tokenizer(folder: Path) -> Any:
    """A byte-level tokenizer that decodes exactly what it encodes, saved in ``folder``.

    verl's reward workers load the actor's tokenizer from
    ``actor_rollout_ref.model.path``; no model is needed, and nothing is fetched.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {char: n for n, char in enumerate(pre_tokenizers.ByteLevel.alphabet())}
    vocab["<eos>"] = len(vocab)
    inner = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    inner.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    inner.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=inner, eos_token="<eos>", pad_token="<eos>"
    )
    tokenizer.save_pretrained(str(folder))
    return tokenizer


def compose(overrides: Sequence[str], config_file: Path | None = None) -> Any:
    """verl's trainer config as ``verl.trainer.main_ppo`` composes it.

    Without ``config_file``: verl's own ``ppo_trainer`` with ``overrides`` (the
    command-line form). With one: that file as the primary config, as
    ``main_ppo --config-path=DIR --config-name=NAME`` loads it.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir, initialize_config_module

    if config_file is None:
        with initialize_config_module("verl.trainer.config", version_base=None):
            return hydra_compose("ppo_trainer", overrides=list(overrides))
    with initialize_config_dir(str(config_file.resolve().parent), version_base=None):
        return hydra_compose(config_file.stem, overrides=list(overrides))


def responses_batch(tokenizer: Any, rows: Sequence[dict[str, Any]]) -> Any:
    """The rows as the rollout leaves them: a ``DataProto`` of prompt and response ids."""
    import numpy as np
    import torch
    from verl import DataProto

    encoded = [tokenizer.encode(str(row["response"])) for row in rows]
    length = max([len(ids) for ids in encoded] + [1]) + 1
    count = len(rows)
    prompts = torch.zeros(count, PROMPT_TOKENS, dtype=torch.long)
    responses = torch.zeros(count, length, dtype=torch.long)
    mask = torch.zeros(count, PROMPT_TOKENS + length, dtype=torch.long)
    mask[:, :PROMPT_TOKENS] = 1
    for n, ids in enumerate(encoded):
        responses[n, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        # An empty response still has its end-of-sequence token, as generation leaves it.
        mask[n, PROMPT_TOKENS : PROMPT_TOKENS + max(len(ids), 1)] = 1

    def column(values: list[Any]) -> Any:
        array = np.empty(count, dtype=object)
        array[:] = values
        return array

    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "attention_mask": mask},
        non_tensors={
            "data_source": column([row.get("data_source", "chalk") for row in rows]),
            "reward_model": column([{"ground_truth": row.get("ground_truth")} for row in rows]),
            "extra_info": column([dict(row.get("extra_info") or {}) for row in rows]),
        },
    )


def loaded_function(config: Any) -> str:
    """``module:name`` of the reward function verl's loader returns for ``config``, or ``""``."""
    from verl.trainer.ppo.reward import get_custom_reward_fn

    wrapped = get_custom_reward_fn(config)
    if wrapped is None:
        return ""
    function = wrapped.args[0]  # verl's partial(_call_with_kwargs, raw_fn, reward_kwargs)
    return f"{function.__module__}:{function.__qualname__}"


def manager_name(config: Any) -> str:
    """The class name of the reward manager verl's reward loop makes for ``config``."""
    try:
        from verl.trainer.ppo.reward import resolve_reward_manager_cls
    except ImportError:  # verl 0.7: the registered managers only
        from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls

        return str(get_reward_manager_cls(config.reward.reward_manager.name).__name__)
    return str(resolve_reward_manager_cls(config).__name__)


@contextmanager
def ray_session(cpus: int = 2) -> Iterator[None]:
    """A local Ray for the reward workers; its workers find this checkout's packages."""
    import ray

    root = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    ray.init(
        num_cpus=cpus,
        include_dashboard=False,
        logging_level="ERROR",
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )
    try:
        yield
    finally:
        ray.shutdown()


@contextmanager
def reward_loop(config: Any) -> Iterator[Any]:
    """verl's ``RewardLoopManager`` for ``config``; its named workers end with it."""
    import ray
    from verl.experimental.reward_loop import RewardLoopManager

    manager = RewardLoopManager(config)
    try:
        yield manager
    finally:
        for worker in manager.reward_loop_workers:
            ray.kill(worker)


def scores(manager: Any, batch: Any) -> list[float]:
    """Each row's reward as verl's trainer gets it: ``rm_scores`` at the last response token."""
    out = manager.compute_rm_score(batch)
    return [float(value) for value in out.batch["rm_scores"].sum(dim=-1).tolist()]


def loaded(config: Any) -> dict[str, Any]:
    """What verl loads for ``config``: the function, the manager, the reward function's config."""
    from omegaconf import OmegaConf

    return {
        "function": loaded_function(config),
        "manager": manager_name(config),
        "custom_reward_function": OmegaConf.to_container(
            config.reward.custom_reward_function, resolve=True
        ),
    }


def run(
    rows: Sequence[dict[str, Any]],
    overrides: Sequence[str],
    *,
    config_file: Path | None = None,
    rounds: int = 1,
    workers: int = 2,
) -> dict[str, Any]:
    """Score ``rows`` ``rounds`` times through verl's reward loop (none: only load).

    Returns ``loaded``'s keys, each row's ``scores`` (of the last round), the
    seconds of each round (``rounds_s``) and their median.
    """
    with tempfile.TemporaryDirectory(prefix="verl-tokenizer-") as folder:
        tokenizer = make_tokenizer(Path(folder))
        config = compose(
            [
                *overrides,
                f"actor_rollout_ref.model.path={folder}",
                f"reward.num_workers={workers}",
            ],
            config_file,
        )
        found = {**loaded(config), "scores": [], "rounds_s": []}
        if rounds > 0:
            batch = responses_batch(tokenizer, rows)
            with ray_session(), reward_loop(config) as manager:
                for _ in range(rounds):
                    started = time.perf_counter()
                    found["scores"] = scores(manager, batch)
                    found["rounds_s"].append(time.perf_counter() - started)
    found["median_s"] = statistics.median(found["rounds_s"]) if found["rounds_s"] else None
    return found


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows", type=Path, help="a JSON list of {response, ground_truth, ...}")
    parser.add_argument("--config-file", type=Path, help="a config that extends ppo_trainer")
    parser.add_argument("--rounds", type=int, default=1, help="0: load the config only")
    parser.add_argument("--workers", type=int, default=2, help="verl's reward.num_workers")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as on main_ppo's line")
    args = parser.parse_args(argv)
    rows = json.loads(args.rows.read_text())
    found = run(
        rows,
        args.overrides,
        config_file=args.config_file,
        rounds=args.rounds,
        workers=args.workers,
    )
    json.dump(found, sys.stdout)
    print()


if __name__ == "__main__":
    main()
