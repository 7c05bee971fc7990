"""LLM tokens and what they cost: per criterion, per job, per batch.

A rubric judge writes its tokens into its verdict's metadata: per criterion
``criterion_i_prompt_tokens`` and ``criterion_i_completion_tokens``, and for
the judge ``rubric_prompt_tokens`` and ``rubric_completion_tokens``. A job's
usage is the sum over its steps, a batch's the sum over its jobs. A cost is
estimated only where a price is configured (``CHALK_LLM_PROMPT_PRICE_PER_MTOK``,
``CHALK_LLM_COMPLETION_PRICE_PER_MTOK``, in USD per million tokens).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from chalk_client.jobs import JobResult
from chalk_client.scoring import Scoring
from chalk_client.settings import ChalkSettings

PROMPT_TOKENS = "rubric_prompt_tokens"
"""Metadata key of a rubric verdict's prompt tokens, all criteria together."""
COMPLETION_TOKENS = "rubric_completion_tokens"
"""Metadata key of a rubric verdict's completion tokens, all criteria together."""
MILLION = 1_000_000


def _count(metadata: dict[str, str], key: str) -> int:
    try:
        return max(int(metadata.get(key, "0")), 0)
    except ValueError:
        return 0


def format_cost(usd: float) -> str:
    """A cost for people: cents for sums of a dollar or more, finer below."""
    return f"${usd:,.2f}" if usd >= 1 else f"${usd:.4f}"


@dataclass(frozen=True)
class TokenUsage:
    """Prompt and completion tokens spent on LLM requests."""

    prompt: int = 0
    completion: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(self.prompt + other.prompt, self.completion + other.completion)

    @property
    def total(self) -> int:
        """Prompt and completion tokens together."""
        return self.prompt + self.completion

    @classmethod
    def of_scoring(cls, scoring: Scoring) -> TokenUsage:
        """The tokens a verdict records in its metadata (none for judges without an LLM)."""
        metadata = scoring.metadata
        return cls(_count(metadata, PROMPT_TOKENS), _count(metadata, COMPLETION_TOKENS))

    @classmethod
    def of_result(cls, result: JobResult) -> TokenUsage:
        """The tokens of every scored step of a job."""
        return cls.sum(cls.of_scoring(step) for step in result.steps)

    @classmethod
    def sum(cls, usages: Iterable[TokenUsage]) -> TokenUsage:
        """The total of ``usages``."""
        total = cls()
        for usage in usages:
            total = total + usage
        return total

    def cost(self, settings: ChalkSettings) -> float | None:
        """The estimated cost in USD at the configured prices; ``None`` when none is set."""
        prompt_price = settings.llm_prompt_price_per_mtok
        completion_price = settings.llm_completion_price_per_mtok
        if prompt_price is None and completion_price is None:
            return None
        return (
            self.prompt * (prompt_price or 0.0) + self.completion * (completion_price or 0.0)
        ) / MILLION

    def describe(self, cost: float | None = None) -> str:
        """``"51,000 prompt + 5,100 completion tokens"``, with ``", est. $0.0107"`` if costed."""
        text = f"{self.prompt:,} prompt + {self.completion:,} completion tokens"
        return text if cost is None else f"{text}, est. {format_cost(cost)}"
