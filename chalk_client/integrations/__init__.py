"""Chalk judges where RL and eval teams already work: TRL, verl and inspect_ai.

The framework-specific modules (``trl``, ``verl``, ``inspect``) are imported
by name; this package re-exports the pieces they share, which need no
framework: ``Sample`` (one rollout as a framework hands it over), the
submission builders, and ``SampleScorer``, the engine under each of them.
"""

from chalk_client.code_blocks import extract_code_block
from chalk_client.integrations.samples import Sample, default_transcript
from chalk_client.integrations.scorer import SampleScorer
from chalk_client.integrations.submissions import CodeBlockSubmission, TextSubmission

__all__ = [
    "CodeBlockSubmission",
    "Sample",
    "SampleScorer",
    "TextSubmission",
    "default_transcript",
    "extract_code_block",
]
