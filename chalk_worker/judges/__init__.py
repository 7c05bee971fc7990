"""The judge evaluators, one module per judge type, registered by importing them here."""

from chalk_worker.judges import always_pass, combine, custom, executable, regex, rubric
from chalk_worker.judges.base import JudgeContext, JudgeWaits, LLMBudget, evaluate, evaluator

__all__ = [
    "JudgeContext",
    "JudgeWaits",
    "LLMBudget",
    "always_pass",
    "combine",
    "custom",
    "evaluate",
    "evaluator",
    "executable",
    "regex",
    "rubric",
]
