"""Reading rollout files (JSONL of jobs) and result files (JSONL of results)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, TextIO

from pydantic import TypeAdapter, ValidationError

from chalk_client.errors import ConfigurationError, InvalidJobError
from chalk_client.jobs import JobResult, JobStatus, ScoringJob, Step
from chalk_client.judge_specs import JudgeSpec

_judge_adapter: TypeAdapter[JudgeSpec] = TypeAdapter(JudgeSpec)
_steps_adapter: TypeAdapter[list[Step]] = TypeAdapter(list[Step])

RESULT_START = b'{"job_id":'
"""How every line ``chalk score`` writes begins: a torn last line is recognised by it."""
_SHOWN_ERRORS = 3


def describe_errors(exc: ValidationError) -> str:
    """A validation error on one line: ``where: what`` for each of the first few problems."""
    problems = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"])
        what = error["msg"].removeprefix("Value error, ")
        problems.append(f"{where}: {what}" if where else what)
    more = len(problems) - _SHOWN_ERRORS
    shown = problems[:_SHOWN_ERRORS] + ([f"and {more} more"] if more > 0 else [])
    return "; ".join(shown)


def _no_constant(name: str) -> Any:
    raise ValueError(
        f"{name} is not valid JSON (JSON numbers are finite); write a number, a string or null"
    )


_SURROGATE = re.compile("[\ud800-\udfff]")


def _holds_a_surrogate(value: Any) -> bool:
    """Whether a string anywhere in ``value`` (``json``'s objects) holds a lone surrogate."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def load_json(text: str) -> Any:
    """JSON as JSON defines it, and as workers read it; ``ValueError`` saying what is not.

    Python's reader alone would take ``NaN`` and ``Infinity``, and escapes of lone
    surrogates (``"\\ud800"``): strings no UTF-8 text can hold, so a job holding one
    could be scored but its result never written.
    """
    value = json.loads(text, parse_constant=_no_constant)
    if ("\\ud" in text or "\\uD" in text) and _holds_a_surrogate(value):
        raise ValueError(
            "it escapes a lone surrogate (such as \\ud800, half of a pair), which is no "
            "character; write the character itself, or both halves of its pair"
        )
    return value


_JUDGE_SHAPE = (
    'must hold one judge (a JSON object with a "type", e.g. '
    '{"type": "regex", "patterns": ["42"]}) or a non-empty list of steps'
)


@dataclass(frozen=True)
class DefaultJudge:
    """The judge (or steps) for rollout lines that bring none, from ``--judge``."""

    judge: JudgeSpec | None = None
    steps: list[Step] | None = None

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> DefaultJudge:
        """Read a judge object (``{"type": ...}``) or a non-empty list of steps from a JSON file."""
        try:
            data = load_json(Path(path).read_text(encoding="utf-8"))
        except RecursionError:
            raise InvalidJobError(f"the judge file {path} is nested too deeply to read") from None
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise InvalidJobError(f"could not read the judge file {path}: {reason}") from exc
        if isinstance(data, dict) and "type" not in data and "steps" in data:
            steps = data["steps"]
        elif isinstance(data, list):
            steps = data
        elif isinstance(data, dict) and "type" in data:
            steps = None
        else:
            held = 'an object without a "type"' if isinstance(data, dict) else json.dumps(data)
            raise InvalidJobError(f"the judge file {path} {_JUDGE_SHAPE}; it holds {held:.60}")
        if steps is not None and (not isinstance(steps, list) or not steps):
            raise InvalidJobError(
                f"the judge file {path} {_JUDGE_SHAPE}; its steps are {json.dumps(steps):.60}"
            )
        try:
            if steps is not None:
                return cls(steps=_steps_adapter.validate_python(steps))
            return cls(judge=_judge_adapter.validate_python(data))
        except ValidationError as exc:
            raise InvalidJobError(
                f"the judge file {path} is not a valid judge: {describe_errors(exc)}"
            ) from exc

    @cached_property
    def canonical(self) -> str:
        """This judge (or these steps) as canonical JSON: the same text for the same judge."""
        if self.judge is not None:
            data: Any = self.judge.model_dump(mode="json")
        else:
            data = [step.model_dump(mode="json") for step in self.steps or []]
        return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def fills(self, line: Mapping[str, Any]) -> bool:
        """Whether ``line`` takes this judge: it has neither judge nor steps, and there is one."""
        if line.get("judge") is not None or line.get("steps") is not None:
            return False
        return self.judge is not None or self.steps is not None

    def apply(self, line: dict[str, Any]) -> dict[str, Any]:
        """The line with this judge filled in, if the line has neither judge nor steps."""
        if not self.fills(line):
            return line
        if self.judge is not None:
            return {**line, "judge": self.judge.model_dump(mode="json")}
        assert self.steps is not None
        return {**line, "steps": [s.model_dump(mode="json") for s in self.steps]}


@dataclass(frozen=True)
class BadLine:
    """A rollout line that is not a valid job."""

    number: int
    reason: str
    job_id: str = ""
    """The line's ``id`` if it has a usable one, else the id its text would get."""

    def trace(self, path: str | os.PathLike[str]) -> JobResult:
        """The ``failed`` result that records, in the results, that this line was skipped."""
        return JobResult(
            job_id=self.job_id,
            status=JobStatus.FAILED,
            error=(
                f"not scored: line {self.number} of {path} is not a valid job ({self.reason}); "
                "it was skipped (--skip-invalid). Fix the line and run chalk score again"
            ),
        )


def stable_id(raw_line: str, judge: str = "") -> str:
    """The id of a rollout line without one: a hash of its text, the same on every run.

    ``judge`` is the canonical JSON of the judge the line takes from ``--judge``
    (``""`` for a line with its own): the same line under another judge is
    another job, so it gets another id.
    """
    text = raw_line.strip() + ("\n" + judge if judge else "")
    return "sha256-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _line_id(raw: str, data: Any = None) -> str:
    """The id of a line that is not a valid job: its own ``id`` if usable, else from its bytes.

    A line whose JSON holds ``NaN`` keeps its ``id`` too (read leniently, for that only).
    """
    if data is None:
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            data = None
    own = data.get("id") if isinstance(data, dict) else None
    if isinstance(own, str) and 0 < len(own) <= 512 and not _SURROGATE.search(own):
        return own
    text = raw.strip().encode("utf-8", "surrogateescape")
    return "sha256-" + hashlib.sha256(text).hexdigest()[:32]


_NO_JUDGE = (
    'the line has no "judge" and no "steps", and no --judge was given: add one to the line, '
    "or give every line without one the same judge with chalk score --judge JUDGE.json"
)


def _text_problem(raw: str) -> str | None:
    """Why a line read with ``surrogateescape`` is not UTF-8 text, or ``None`` if it is."""
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError as exc:
        byte = ord(raw[exc.start]) & 0xFF
        return f"not UTF-8 text (byte 0x{byte:02x} at character {exc.start + 1})"
    return None


def read_rollouts(
    path: str | os.PathLike[str], default: DefaultJudge | None = None
) -> Iterator[ScoringJob | BadLine]:
    """Each line of a JSONL file as a job (ids filled in), or a ``BadLine`` saying why not.

    Raises ``InvalidJobError`` if the file cannot be opened.
    """
    default = default or DefaultJudge()
    try:
        # Undecodable bytes come through as surrogates, so one bad line does not hide the rest.
        lines = open(path, encoding="utf-8", errors="surrogateescape")  # noqa: SIM115
    except OSError as exc:
        reason = exc.strerror or exc
        raise InvalidJobError(f"could not read the rollouts file {path}: {reason}") from exc
    with lines:
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            problem = _text_problem(raw)
            if problem is not None:
                yield BadLine(number, problem, _line_id(raw))
                continue
            try:
                data = load_json(raw)
            except RecursionError:
                yield BadLine(number, "its JSON is nested too deeply to read", _line_id(raw))
                continue
            except ValueError as exc:
                yield BadLine(number, f"not valid JSON: {exc}", _line_id(raw))
                continue
            if not isinstance(data, dict):
                yield BadLine(
                    number, "a rollout line must be a JSON object (a ScoringJob)", _line_id(raw)
                )
                continue
            if data.get("judge") is None and data.get("steps") is None and not default.fills(data):
                yield BadLine(number, _NO_JUDGE, _line_id(raw, data))
                continue
            if data.get("id") is None:
                data["id"] = stable_id(raw, default.canonical if default.fills(data) else "")
            data = default.apply(data)
            try:
                job = ScoringJob.model_validate(data)
            except ValidationError as exc:
                yield BadLine(number, describe_errors(exc), _line_id(raw, data))
                continue
            except RecursionError:
                yield BadLine(number, "a value in it is nested too deeply to read", _line_id(raw))
                continue
            yield job


@dataclass(frozen=True)
class ResultsFile:
    """A results file (``--out``) as found before scoring: the jobs done, where results go.

    It is only ever appended to. The one thing ever removed is a torn last line
    (the start of a result an interrupted run was writing); a file holding
    anything else that is not a result is refused, never rewritten.
    """

    path: Path
    done: frozenset[str] = frozenset()
    """Ids with a ``succeeded`` result: a re-run skips them (failed ones are scored again)."""
    failures: Mapping[str, str] = field(default_factory=dict)
    """Ids whose last result is ``failed``, with its error."""
    size: int = 0
    """The file's size when read."""
    end: int = 0
    """Where its complete lines end: a torn last line starts here."""
    regular: bool = True
    """Whether it is (or will be) a regular file; a device or pipe is just written to."""

    @classmethod
    def read(
        cls,
        path: str | os.PathLike[str],
        others: Mapping[str, str | os.PathLike[str] | None] | None = None,
    ) -> ResultsFile:
        """Check ``path`` can take results and read the ids already scored there.

        ``others`` names the command's input files (``{"rollouts file": path}``):
        results are never written over one of them. Raises ``ConfigurationError``
        saying what is wrong and what to do; nothing is written here.
        """
        results = Path(path)
        for label, other in (others or {}).items():
            if other is None or not results.exists() or not Path(other).exists():
                continue
            if os.path.samefile(results, other):
                raise ConfigurationError(
                    f"--out {results} is the {label} ({other}); results would be written "
                    "into it. Give --out another file."
                )
        if results.is_dir():
            raise ConfigurationError(
                f"--out {results} is a folder; give a file name, e.g. {results / 'results.jsonl'}"
            )
        if not results.exists():
            if not results.parent.is_dir():
                raise ConfigurationError(
                    f"--out {results}: there is no folder {results.parent}; create it first"
                )
            return cls(results)
        if not results.is_file():
            return cls(results, regular=False)
        try:
            return cls._scan(results)
        except OSError as exc:
            reason = exc.strerror or exc
            raise ConfigurationError(f"could not read --out {results}: {reason}") from exc

    @classmethod
    def _scan(cls, results: Path) -> ResultsFile:
        done: set[str] = set()
        failures: dict[str, str] = {}
        offset = end = 0
        with results.open("rb") as lines:
            for number, raw in enumerate(lines, start=1):
                end, offset = offset, offset + len(raw)
                if not raw.strip():
                    continue
                try:
                    result = JobResult.model_validate_json(raw.decode("utf-8"))
                except (UnicodeDecodeError, ValidationError) as exc:
                    if not raw.endswith(b"\n") and raw.startswith(RESULT_START):
                        return cls(results, frozenset(done), failures, size=offset, end=end)
                    text = not isinstance(exc, UnicodeDecodeError)
                    what = "is not a result of chalk score" if text else "is not UTF-8 text"
                    raise ConfigurationError(
                        f"--out {results}:{number} {what}; results are only ever added to a "
                        "file of results, so this one is left as it is. Give --out a new file "
                        "(or one chalk score wrote)."
                    ) from None
                if result.status is JobStatus.SUCCEEDED:
                    done.add(result.job_id)
                    failures.pop(result.job_id, None)
                else:
                    done.discard(result.job_id)
                    failures[result.job_id] = result.error or ""
        return cls(results, frozenset(done), failures, size=offset, end=offset)

    def open(self) -> TextIO:
        """Open for appending, after removing a torn last line (and only that).

        Raises ``ConfigurationError`` if the file cannot be written, or changed
        since it was read (another ``chalk score`` writing to it, say).
        """
        try:
            if self.regular and self.path.exists():
                self._repair()
            return self.path.open("a", encoding="utf-8")
        except OSError as exc:
            reason = exc.strerror or exc
            raise ConfigurationError(f"could not write --out {self.path}: {reason}") from exc

    def _repair(self) -> None:
        with self.path.open("r+b") as handle:
            size = handle.seek(0, os.SEEK_END)
            if size != self.size:
                raise ConfigurationError(
                    f"--out {self.path} changed while chalk score was reading it (is another "
                    "chalk score writing to it?); nothing was scored"
                )
            if self.end < self.size:
                handle.truncate(self.end)  # the torn line: the start of an unfinished result
            elif self.size:
                handle.seek(-1, os.SEEK_END)
                if handle.read(1) != b"\n":
                    handle.write(b"\n")  # a last result without its newline: keep it whole
