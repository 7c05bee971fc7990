"""A code-execution reward for GRPO: run the tests of each row against the model's code.

``run_tests`` is the scoring script (an executable judge, sandboxed by the
worker); ``reward`` builds the TRL reward function around it; ``demo`` runs
one GRPO step's reward computation on the embedded queue, called exactly as
``GRPOTrainer`` calls reward functions; ``train_grpo`` is the training script
itself (it needs TRL, datasets and a model). This ``__init__`` stays empty:
scoring scripts import it on every start.
"""
