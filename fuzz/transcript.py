"""Fuzz transcripts: messages and their content blocks, as JSON, and what judges read of them.

An input is a transcript's JSON. It is a ``ValidationError`` or a ``Transcript``,
read from JSON text as a worker reads it, and from the Python objects ``chalk score``
reads it into: that reader takes whatever the first takes, as the same transcript.
Nothing else may escape, and nothing may be printed or warned. A transcript either
way validates round-trips through JSON unchanged (the module's promise), and everything
the judges take from it works: the assistant text the regex judge searches, the
rubric's renderings (whole, with reasoning, cut short, the final message) and the
program the tests judge finds in the last assistant message (or ``NoProgram``).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from pydantic import ValidationError

from chalk_client.judge_specs import TestsJudge, TranscriptContext
from chalk_client.rollouts import load_json
from chalk_client.transcript import Transcript
from chalk_worker.judges.contexts import render_final_message, render_transcript
from chalk_worker.judges.programs.source import NoProgram, find_program
from fuzz.harness import ContractBroken, Target, Unread, main, quiet

_NO_FOLDER = Path("/dev/null/chalk-no-files")
_SPECS = (
    TranscriptContext(),
    TranscriptContext(include_reasoning=True, max_chars=200),
)
_JUDGES = tuple(
    TestsJudge(language=language, tests=[{"stdin": "", "stdout": ""}])
    for language in ("auto", "python", "cpp")
)


def _from_python(data: bytes) -> Transcript | Unread | None:
    """The transcript validated from the objects ``chalk score`` reads a line into.

    ``Unread`` where that reader (``load_json``) refuses the text.
    """
    try:
        value = load_json(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return Unread.INPUT
    with quiet("Transcript.model_validate"):
        try:
            return Transcript.model_validate(value)
        except ValidationError:
            return None


def _read_by_judges(transcript: Transcript) -> None:
    """What the regex, rubric and tests judges take from the transcript."""
    for message in transcript.messages:
        if not all(isinstance(part, str) for part in message.text_parts()):
            raise ContractBroken(f"text_parts of {message!r:.200} are not all text")
    if not isinstance(transcript.assistant_text(), str):
        raise ContractBroken("assistant_text is not text")
    for spec in _SPECS:
        render_transcript(transcript, spec)
    render_final_message(transcript)
    for judge in _JUDGES:
        with contextlib.suppress(NoProgram):
            find_program(judge, transcript, _NO_FOLDER)


def _held_to_json(transcript: Transcript) -> None:
    """The transcript round-trips through JSON unchanged, and the judges can read it."""
    text = transcript.model_dump_json()
    again = Transcript.model_validate_json(text)
    if again != transcript or again.model_dump_json() != text:
        raise ContractBroken(f"changed on a round trip through JSON: {text:.300}")
    with quiet("the judges' reading"):
        _read_by_judges(transcript)


def check(data: bytes) -> None:
    """Validate ``data`` as a transcript, both ways; hold what comes of it to the contract."""
    with quiet("Transcript.model_validate_json"):
        try:
            transcript: Transcript | None = Transcript.model_validate_json(data)
        except ValidationError:
            transcript = None
    python = _from_python(data)
    # Python's reader is the more lenient (a bad escape in a duplicate key's lost value,
    # say): it must take what pydantic's takes, and whatever it takes must then hold.
    if transcript is not None and python is not Unread.INPUT and python != transcript:
        raise ContractBroken(f"from JSON {transcript!r:.300}, from Python {python!r:.300}")
    if transcript is not None:
        _held_to_json(transcript)
    if isinstance(python, Transcript) and python != transcript:
        _held_to_json(python)


TARGET = Target(name="transcript", check=check, doc=__doc__ or "", flags=("-max_len=8192",))

if __name__ == "__main__":
    main(TARGET)
