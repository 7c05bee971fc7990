"""The judge evaluators, one module per judge type, found through the registry in ``base``.

Each module registers its evaluator when imported; ``base.evaluate`` imports
the module of a judge type the first time a judge of that type is scored, so a
process scoring regex judges never loads the sandbox or the LLM client.
"""

from chalk_worker.judges.base import JudgeContext, JudgeWaits, LLMBudget, evaluate, evaluator

__all__ = ["JudgeContext", "JudgeWaits", "LLMBudget", "evaluate", "evaluator"]
