"""Fuzz the regex judge: patterns as JSON, compiled and checked, searched within the time limit.

An input is UTF-8 text (undecodable bytes become lone surrogates) cut at NUL
characters: every part but the last is a pattern (a part that is a JSON object is
given as one, ``{"pattern": ..., "flags": ...}``), and the last part is what the
student said. The ``regex`` judge made of the patterns is a ``ValidationError`` or a
judge that survives JSON unchanged; nothing else may escape, and nothing may be
printed or warned. The judge is then scored by ``score_job``, as a worker does: the
job succeeds, within ``regex_timeout_s`` (and a little), and unless the search ran
out of time its verdict is ``re.search``'s own here.
"""

from __future__ import annotations

import json
import time
from typing import Any

from pydantic import ValidationError

from chalk_client.jobs import JobStatus, ScoringJob
from chalk_client.judge_specs import RegexJudge
from chalk_client.scoring import ZeroCause
from chalk_client.settings import ChalkSettings
from chalk_client.transcript import Message, Transcript
from chalk_worker import score_job
from fuzz.harness import PROJECT, ContractBroken, Target, main, quiet

LIMIT_S = 0.5
"""The regex judge's time limit here (``regex_timeout_s``)."""
SLACK_S = 4.0
"""What a search may take past the limit: a fresh helper's start, the job's own work."""
MAX_PATTERNS = 8

_SETTINGS = ChalkSettings(regex_timeout_s=LIMIT_S)


def _pattern(part: str) -> Any:
    if part.startswith("{"):
        try:
            value = json.loads(part)
        except ValueError:
            return part
        if isinstance(value, dict):
            return value
    return part


def parts(data: bytes) -> tuple[list[Any], str]:
    """The patterns (strings or objects) and the text that ``data`` holds."""
    pieces = data.decode("utf-8", "surrogateescape").split("\0")
    text = pieces.pop() if len(pieces) > 1 else ""
    return [_pattern(piece) for piece in pieces[:MAX_PATTERNS]], text


def _judge(patterns: list[Any]) -> RegexJudge | None:
    with quiet("RegexJudge.model_validate_json"):
        try:
            judge = RegexJudge.model_validate_json(
                json.dumps({"type": "regex", "patterns": patterns})
            )
        except ValidationError:
            return None
    again = RegexJudge.model_validate_json(judge.model_dump_json())
    if again != judge:
        raise ContractBroken(f"changed on a round trip through JSON: {judge!r:.300}")
    return judge


def check(data: bytes) -> None:
    """Validate the patterns of ``data`` into a judge and score its text with it."""
    patterns, text = parts(data)
    judge = _judge(patterns)
    if judge is None:
        return
    job = ScoringJob(
        transcript=Transcript(messages=[Message(role="assistant", content=text)]), judge=judge
    )
    started = time.monotonic()
    result = score_job(job, settings=_SETTINGS)
    took = time.monotonic() - started
    if result.status is not JobStatus.SUCCEEDED or result.scoring is None:
        raise ContractBroken(f"the job {result.status}: {result.error}")
    if took > LIMIT_S + SLACK_S:
        raise ContractBroken(f"scoring took {took:.1f} s (limit {LIMIT_S} s)")
    if result.scoring.cause is ZeroCause.TIMEOUT:
        return
    missed = [p.pattern for p in judge.patterns if p.search(text) is None]
    said = result.scoring.metadata.get("unmatched_patterns", "")
    if result.scoring.score != (0.0 if missed else 1.0) or said != "\n".join(missed):
        raise ContractBroken(f"scored {result.scoring!r:.300}; unmatched here: {missed!r:.300}")


TARGET = Target(
    name="regex",
    check=check,
    doc=__doc__ or "",
    flags=("-max_len=4096",),
    instrument=(*PROJECT, "re._parser", "re._compiler"),
)

if __name__ == "__main__":
    main(TARGET)
