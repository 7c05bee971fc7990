"""Results in words: counts with their nouns, zeros by cause, a grader error's message.

Shared by the ``chalk`` command's summaries and ``BatchSummary``.
"""

from __future__ import annotations

from collections import Counter

from chalk_client.jobs import JobResult
from chalk_client.scoring import ZeroCause


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``"1 job"``, ``"3 jobs"``: a count with its noun in the right number."""
    return f"{count:,} {noun if count == 1 else many or noun + 's'}"


def grader_error_message(result: JobResult) -> str:
    """What went wrong in a grader error: the verdict's ``error``, where the reference keeps it."""
    if result.scoring is None:
        return ""
    return result.scoring.metadata.get("error", "no error recorded")


def describe_causes(zeros: Counter[ZeroCause | None]) -> str:
    """``"3 grader_error, 2 script_zero"``: counts by cause, most first."""
    return ", ".join(
        f"{count:,} {cause or 'no cause recorded'}" for cause, count in zeros.most_common()
    )
