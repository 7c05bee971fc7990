"""GRPO training with the code reward, on the embedded queue (or a cluster).

    pip install trl datasets            # and a GPU for anything but a toy model
    python -m tasks.code_reward.train_grpo --model Qwen/Qwen2.5-0.5B-Instruct
    python -m tasks.code_reward.train_grpo --model ... --redis-url redis://host:6379/0

Written against TRL's documented ``GRPOTrainer`` API (``reward_funcs`` takes
callables called with keyword ``prompts``, ``completions`` and the dataset's
columns). This repository's tests do not run it (they install neither TRL nor
a model); ``tasks.code_reward.demo`` runs the reward side of a step exactly as
the trainer calls it.
"""

from __future__ import annotations

import argparse

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from tasks.code_reward.problems import rows
from tasks.code_reward.reward import code_reward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a causal LM (hub id or folder)")
    parser.add_argument("--redis-url", help="score on this Chalk cluster instead of here")
    parser.add_argument("--output-dir", default="grpo-code-reward")
    args = parser.parse_args()
    reward = code_reward(redis_url=args.redis_url, failed_value=None)
    trainer = GRPOTrainer(
        model=args.model,
        reward_funcs=reward,
        train_dataset=Dataset.from_list(rows() * 64),
        args=GRPOConfig(
            output_dir=args.output_dir,
            num_generations=4,
            per_device_train_batch_size=4,
            max_completion_length=256,
            logging_steps=1,
        ),
    )
    trainer.train()


if __name__ == "__main__":
    main()
