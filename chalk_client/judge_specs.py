"""Judges as data: pydantic specs with a ``type`` field, sent to workers as JSON.

A spec says *what* to judge; the worker's evaluators (``chalk_worker.judges``)
do the judging. ``a & b`` builds an ``all`` judge and ``a | b`` an ``any``
judge, flattened, with the reference's short-circuit rules.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from chalk_client.positional import UNSET, with_positional
from chalk_client.program_tests import Compare, Language, TestCase, language_named
from chalk_client.regex_pattern import RegexPattern as RegexPattern  # it was defined here
from chalk_client.transcript import JsonData


class _Typed(BaseModel):
    """A model chosen by its ``type`` field, which is always written out.

    Numbers must be finite: JSON has no NaN or Infinity.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @model_serializer(mode="wrap")
    def _keep_type(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            return {"type": getattr(self, "type"), **data}  # noqa: B009
        return data


class _JudgeBase(_Typed):
    """What every judge spec shares: combination with ``&`` and ``|``."""

    def __and__(self, other: JudgeSpec) -> AllJudge:
        return AllJudge(judges=[*_parts(self, AllJudge), *_parts(other, AllJudge)])

    def __or__(self, other: JudgeSpec) -> AnyJudge:
        return AnyJudge(judges=[*_parts(self, AnyJudge), *_parts(other, AnyJudge)])


def _parts(judge: object, kind: type[AllJudge] | type[AnyJudge]) -> list[_JudgeBase]:
    if not isinstance(judge, _JudgeBase):
        raise TypeError(f"can only combine judges, got {type(judge).__name__}")
    return list(judge.judges) if isinstance(judge, kind) else [judge]


class ExecutableJudge(_JudgeBase):
    """Runs a command, usually a scoring script, and reads the score it writes.

    The last argument is the *name* of the output file: the worker makes a fresh
    temporary folder, passes the script the full path there, and removes the
    folder afterwards. The script writes ``{"score": float, "metadata": {...}}``
    and exits 0; anything else scores 0 and stops the task. In the command,
    ``{python}`` is the worker's interpreter, ``{submission}`` the first saved
    submission file and ``{submission_dir}`` the folder of saved copies.
    """

    type: Literal["executable"] = "executable"
    command: list[str]
    """Program and arguments; the last one is the output file's name."""
    continue_threshold: float = -1.0
    """The task continues when the score is at least this."""
    cwd: str | None = None
    """Working directory of the script (placeholders allowed); default: a fresh folder."""
    timeout_s: float | None = Field(default=None, gt=0)
    """Wall-clock limit; ``None`` takes the worker's default (10 minutes)."""

    def __init__(
        self,
        /,
        command: Sequence[str | os.PathLike[str]] = UNSET,
        continue_threshold: float = UNSET,
        cwd: str | None = UNSET,
        timeout_s: float | None = UNSET,
        **data: object,
    ) -> None:
        super().__init__(
            **with_positional(
                data,
                command=command,
                continue_threshold=continue_threshold,
                cwd=cwd,
                timeout_s=timeout_s,
            )
        )

    @field_validator("command", mode="before")
    @classmethod
    def _a_list(cls, command: object) -> object:
        if isinstance(command, str):
            # One string would be one program name (spaces and all), as in the reference:
            # refused here, with the list it most likely meant.
            try:
                meant = json.dumps(shlex.split(command))
            except ValueError:
                meant = '["{python}", "-m", "tasks.my_task.scoring_script", "score.json"]'
            raise ValueError(
                "an executable judge's command is a list of arguments, not one string "
                f"({command!r:.80}); write it as a list, e.g. {meant:.200}"
            )
        if isinstance(command, (list, tuple)):
            return [str(part) if hasattr(part, "__fspath__") else part for part in command]
        return command

    @field_validator("command")
    @classmethod
    def _shape(cls, command: list[str]) -> list[str]:
        if len(command) < 2:
            raise ValueError(
                "an executable judge's command needs the program and, as its last argument, "
                f"the name of the output file the script writes; got {command!r}"
            )
        name = PurePosixPath(command[-1]).name
        if name in ("", ".", ".."):
            raise ValueError(f"the last argument must name the output file, got {command[-1]!r}")
        return command


class RegexJudge(_JudgeBase):
    """Passes when every pattern ``re.search``-es the student's assistant text."""

    type: Literal["regex"] = "regex"
    patterns: list[RegexPattern]
    """Strings or compiled patterns; flags survive JSON."""

    def __init__(
        self,
        /,
        patterns: Sequence[str | re.Pattern[str] | Mapping[str, object]]
        | str
        | re.Pattern[str] = UNSET,
        **data: object,
    ) -> None:
        super().__init__(**with_positional(data, patterns=patterns))

    @field_validator("patterns", mode="before")
    @classmethod
    def _one_is_a_list(cls, patterns: object) -> object:
        if isinstance(patterns, (str, re.Pattern)):
            return [patterns]
        return patterns


class AlwaysPassJudge(_JudgeBase):
    """Scores 1 and continues: for set-up steps and placeholders."""

    type: Literal["always_pass"] = "always_pass"


class CustomJudge(_JudgeBase):
    """A judge registered by name on the workers (see ``register_judge``)."""

    type: Literal["custom"] = "custom"
    name: str = Field(min_length=1)
    params: dict[str, JsonData] = Field(default_factory=dict)
    """Keyword arguments for the registered judge's constructor (JSON values)."""

    def __init__(
        self, /, name: str = UNSET, params: Mapping[str, object] = UNSET, **data: object
    ) -> None:
        super().__init__(**with_positional(data, name=name, params=params))


class Criterion(BaseModel):
    """One rubric line: a yes/no question and the weight it adds when met."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    criterion: str = Field(min_length=1)
    weight: float = 1.0


class _ContextBase(_Typed):
    """What every rubric context spec shares."""


class FileContext(_ContextBase):
    """Shows the LLM the content of saved submission files.

    Paths are relative to the submission (``{submission}`` and
    ``{submission_dir}`` work too). Long files are cut with a visible marker; a
    missing file is shown as missing; a file that resolves outside the
    submission folder (through a link) is the student's misbehaviour.
    """

    type: Literal["file"] = "file"
    paths: list[str]
    max_bytes: int = Field(default=100_000, gt=0)
    """Bytes shown per file; the rest is cut with a visible marker."""

    def __init__(
        self, /, paths: Sequence[str | os.PathLike[str]] | str = UNSET, **data: object
    ) -> None:
        if isinstance(paths, str):
            paths = [paths]
        elif isinstance(paths, (list, tuple)):
            paths = [os.fspath(p) if isinstance(p, os.PathLike) else p for p in paths]
        super().__init__(**with_positional(data, paths=paths))


class TranscriptContext(_ContextBase):
    """Shows the LLM the conversation, rendered readably, tool calls and results included."""

    type: Literal["transcript"] = "transcript"
    include_reasoning: bool = False
    """Whether the student's private reasoning blocks are shown too."""
    max_chars: int = Field(default=200_000, gt=0)
    """Characters shown; a longer transcript loses its middle, with a visible marker."""


class FinalMessageContext(_ContextBase):
    """Shows the LLM only the student's last assistant message."""

    type: Literal["final_message"] = "final_message"


class TextContext(_ContextBase):
    """Shows the LLM a fixed text (a reference answer, the task statement)."""

    type: Literal["text"] = "text"
    text: str

    def __init__(self, /, text: str = UNSET, **data: object) -> None:
        super().__init__(**with_positional(data, text=text))


class CustomContext(_ContextBase):
    """A context provider registered by name on the workers (see ``register_context``)."""

    type: Literal["custom"] = "custom"
    name: str = Field(min_length=1)
    params: dict[str, JsonData] = Field(default_factory=dict)
    """Keyword arguments for the registered provider's constructor (JSON values)."""

    def __init__(
        self, /, name: str = UNSET, params: Mapping[str, object] = UNSET, **data: object
    ) -> None:
        super().__init__(**with_positional(data, name=name, params=params))


ContextSpec = Annotated[
    FileContext | TranscriptContext | FinalMessageContext | TextContext | CustomContext,
    Field(discriminator="type"),
]
"""One context provider of a rubric, chosen by its ``type``."""


class RubricJudge(_JudgeBase):
    """Asks an LLM, one call per criterion, whether the work meets it.

    The score is the sum of the weights of the criteria met; each verdict's
    reason goes into the metadata. The contexts' outputs, joined with blank
    lines, are what the LLM sees (the transcript when no context is given).
    """

    type: Literal["rubric"] = "rubric"
    rubric: list[Criterion] = Field(min_length=1)
    context: list[ContextSpec] = Field(default_factory=list)
    model: str | None = None
    """The model to ask; ``None`` takes ``CHALK_RUBRIC_MODEL``."""
    continue_threshold: float = -1.0
    """The task continues when the score is at least this (by default: always)."""

    def __init__(
        self,
        /,
        rubric: Sequence[Criterion | Mapping[str, object]] = UNSET,
        context: Sequence[ContextSpec | Mapping[str, object]] = UNSET,
        model: str | None = UNSET,
        **data: object,
    ) -> None:
        super().__init__(**with_positional(data, rubric=rubric, context=context, model=model))


class TestsJudge(_JudgeBase):
    """Compiles a program once and runs it on each test case: stdin in, stdout compared.

    The program is the last fenced code block of the last assistant message
    (``source="transcript"``, in ``language`` where the fence says so) or a file
    of the submission. Each test gets a verdict (``AC``, ``WA``, ``PE``,
    ``TLE``, ``MLE``, ``RE``, ``OLE``, ``CE``, ``SKIPPED``) with the CPU time,
    wall time and peak memory it used; the step's ``tests`` and ``compile`` say
    so. ``time_limit_s`` is CPU time, which a busy machine does not use up.
    The step passes (``continue_task``) when every test is accepted.
    """

    __test__ = False  # not a pytest test class, whatever its name

    type: Literal["tests"] = "tests"
    language: Language | Literal["auto"] = "auto"
    """One of ``python``, ``c``, ``cpp``, ``java``, ``go``, ``rust``, ``javascript``,
    ``bash``; ``auto`` takes it from the code block's fence (or the file's extension)."""
    source: str = "transcript"
    """``transcript``, or the path of the program's file inside the submission."""
    tests: list[TestCase] | None = None
    """The test cases; or ``tests_file``."""
    tests_file: str | None = None
    """A JSONL file of test cases (one ``{"stdin", "stdout"}`` per line): a path below a
    folder of ``tasks`` (``tasks/my_task/tests.jsonl``), or ``{submission_dir}/...``."""
    compare: Compare = "tokens"
    """``tokens``, ``exact``, ``{"float_tolerance": 1e-6}`` or ``{"checker": [...]}``."""
    time_limit_s: float = Field(default=2.0, gt=0, le=600)
    """CPU seconds per test; the wall clock is capped at three times that, plus a second."""
    wall_limit_s: float | None = Field(default=None, gt=0, le=1800)
    """Wall-clock seconds per test, if they must be fewer than ``time_limit_s``'s cap; a run
    past it is a ``TLE`` at once (not run again, however busy the machine)."""
    memory_limit_mb: int = Field(default=256, ge=8, le=65536)
    """Memory per test (the program and all it starts); Java's heap gets it all."""
    scoring: Literal["fraction", "all_or_nothing"] = "fraction"
    """``fraction``: tests accepted / tests; ``all_or_nothing``: 1 when all are, else 0."""
    stop_at_first_failure: bool = False
    """Stop at the first test not accepted; those after it are ``SKIPPED``."""
    keep_output: bool = False
    """Keep each test's stdout and stderr in its result (capped by ``CHALK_KEPT_OUTPUT_KB``)."""

    @field_validator("language", mode="before")
    @classmethod
    def _canonical(cls, language: object) -> object:
        return language_named(language)

    @field_validator("source")
    @classmethod
    def _source(cls, source: str) -> str:
        if source == "transcript":
            return source
        pure = PurePosixPath(source)
        if not source or pure.is_absolute() or ".." in pure.parts or pure.name in ("", "."):
            raise ValueError(
                'source is "transcript" or a file\'s path inside the submission (relative, '
                f"without '..'), not {source!r}"
            )
        return source

    @field_validator("tests")
    @classmethod
    def _some_tests(cls, tests: list[TestCase] | None) -> list[TestCase] | None:
        if tests is not None and not tests:
            raise ValueError("a tests judge needs at least one test case")
        return tests

    @field_validator("tests_file")
    @classmethod
    def _tests_file(cls, path: str | None) -> str | None:
        if path is None:
            return path
        pure = PurePosixPath(path.replace("{submission_dir}", "/submission"))
        if ".." in pure.parts or not pure.name:
            raise ValueError(f"tests_file must name a file, without '..': {path!r}")
        if pure.is_absolute() and not path.startswith("{submission_dir}/"):
            raise ValueError(
                "tests_file is a path below a folder of tasks (tasks/my_task/tests.jsonl) or "
                f"in the submission ({{submission_dir}}/tests.jsonl), not {path!r}"
            )
        return path

    @model_validator(mode="after")
    def _tests_or_file(self) -> TestsJudge:
        if (self.tests is None) == (self.tests_file is None):
            raise ValueError('a tests judge needs either "tests" or "tests_file", not both')
        return self


class AllJudge(_JudgeBase):
    """``a & b``: runs judges in order, stops at the first that fails, returns that one's verdict.

    If all pass, the last verdict is returned.
    """

    type: Literal["all"] = "all"
    judges: list[JudgeSpec] = Field(min_length=1)


class AnyJudge(_JudgeBase):
    """``a | b``: runs judges in order, stops at the first that passes, returns that one's verdict.

    If all fail, the last verdict is returned.
    """

    type: Literal["any"] = "any"
    judges: list[JudgeSpec] = Field(min_length=1)


JudgeSpec = Annotated[
    ExecutableJudge
    | RubricJudge
    | RegexJudge
    | AlwaysPassJudge
    | CustomJudge
    | TestsJudge
    | AllJudge
    | AnyJudge,
    Field(discriminator="type"),
]
"""Any judge spec, chosen by its ``type`` field."""
JudgeType = Literal["executable", "rubric", "regex", "always_pass", "custom", "tests", "all", "any"]
"""The ``type`` of a judge spec: one per member of ``JudgeSpec``."""

AllJudge.model_rebuild()
AnyJudge.model_rebuild()
