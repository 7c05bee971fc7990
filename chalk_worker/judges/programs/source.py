"""Which program a ``tests`` judge runs, and in which language.

``source="transcript"``: the last fenced code block of the last assistant
message; with a ``language``, the last block tagged with it (or an alias),
else the last untagged one; with ``language: auto``, the last block whose tag
names one of the judge's languages. Otherwise ``source`` is a file of the
submission, whose extension says the language under ``auto``.

What cannot be found is the student's doing (no code, no such file): the
program "does not compile", and every test is ``CE``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from chalk_client.code_blocks import LANGUAGE_ALIASES, code_blocks, extract_code_block
from chalk_client.judge_specs import TestsJudge
from chalk_client.transcript import Transcript
from chalk_worker.judges.programs.languages import language_of_file

MAX_SOURCE_BYTES = 4 * 1024 * 1024
"""The largest program a submission's file may hold."""


@dataclass(frozen=True)
class Program:
    """The program to build and run."""

    language: str
    source: str


class NoProgram(Exception):
    """Raised when the student gave no program to run (a ``CE`` for every test)."""


def find_program(judge: TestsJudge, transcript: Transcript, submission_dir: Path) -> Program:
    """The program the judge runs; ``NoProgram`` saying why there is none."""
    if judge.source == "transcript":
        return _from_transcript(judge.language, transcript)
    return _from_file(judge.language, submission_dir, judge.source)


def _last_assistant_text(transcript: Transcript) -> str | None:
    for message in reversed(transcript.messages):
        if message.role == "assistant":
            return "\n\n".join(message.text_parts())
    return None


def _from_transcript(language: str, transcript: Transcript) -> Program:
    text = _last_assistant_text(transcript)
    if text is None:
        raise NoProgram("the transcript has no assistant message to take the program from")
    if language != "auto":
        body = extract_code_block(text, language)
        if body is None:
            raise NoProgram(
                f"the last assistant message has no ```{language} code block (nor an untagged one)"
            )
        return Program(language, body)
    for block in reversed(code_blocks(text)):
        if block.language is not None:
            return Program(block.language, block.body)
    tags = ", ".join(sorted(LANGUAGE_ALIASES))
    raise NoProgram(
        "language auto: the last assistant message has no code block whose fence names a "
        f"language ({tags})"
    )


def _from_file(language: str, submission_dir: Path, name: str) -> Program:
    path = submission_dir / name
    real, root = os.path.realpath(path), os.path.realpath(submission_dir)
    if not real.startswith(root + os.sep) or not os.path.isfile(real):
        raise NoProgram(f"the submission has no file {name}")
    if language == "auto":
        found = language_of_file(name)
        if found is None:
            raise NoProgram(f"language auto: the extension of {name} names no language")
        language = found
    size = os.path.getsize(real)
    if size > MAX_SOURCE_BYTES:
        raise NoProgram(f"{name} is {size} bytes, more than a program may be ({MAX_SOURCE_BYTES})")
    with open(real, "rb") as file:
        return Program(language, file.read().decode("utf-8", errors="replace"))
