"""Turning a completion into the files a judge grades.

A reward for code runs the model's code: ``CodeBlockSubmission("solution.py")``
puts the completion's last fenced code block in ``solution.py``, and can add
files from the dataset row (the tests, say) beside it. ``TextSubmission``
hands in the whole completion as one file. Any callable taking a ``Sample``
and returning a ``Submission`` (or ``None`` for no files) does as well.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from chalk_client.code_blocks import extract_code_block
from chalk_client.errors import InvalidJobError
from chalk_client.integrations.samples import Sample
from chalk_client.submission import Submission

SubmissionBuilder = Callable[[Sample], Submission | None]
"""Builds a sample's submission; ``None`` means the job has no files."""


def _relative(path: str) -> str:
    pure = PurePosixPath(path)
    if not path or pure.is_absolute() or ".." in pure.parts:
        raise InvalidJobError(
            f"submission path {path!r} must be relative to the submission, without '..'"
        )
    return path


def _check_paths(main: str, from_columns: Mapping[str, str]) -> None:
    for path in (main, *from_columns):
        _relative(path)
    if main in from_columns:
        raise InvalidJobError(f"{main!r} is both the completion's file and a column's")


def _row_files(sample: Sample, from_columns: Mapping[str, str]) -> dict[str, str]:
    """The files taken from the row: each column's text (other values as JSON)."""
    files: dict[str, str] = {}
    for path, column in from_columns.items():
        value: Any = sample.column(column)
        if value is None:
            raise InvalidJobError(f"sample {sample.index}'s column {column!r} is empty (None)")
        files[path] = value if isinstance(value, str) else json.dumps(value, default=_listed)
    return files


def _listed(value: Any) -> Any:
    """Arrays (numpy's, in verl's batches) as lists, for JSON."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"a {type(value).__name__} cannot be written as JSON")


@dataclass(frozen=True)
class CodeBlockSubmission:
    """The completion's last code block as the file ``path``, plus files from the row.

    ``files_from_columns`` maps more submission paths to columns of the row,
    e.g. ``{"test_solution.py": "tests"}``: each file holds that column's text
    (other values as JSON). A completion without a code block in ``language``
    hands in its whole text as ``path`` (models often answer with bare code).
    """

    path: str = "solution.py"
    language: str | None = "python"
    files_from_columns: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_paths(self.path, self.files_from_columns)

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns every row must have."""
        return tuple(self.files_from_columns.values())

    def __call__(self, sample: Sample) -> Submission:
        text = sample.text
        code = extract_code_block(text, self.language)
        files = _row_files(sample, self.files_from_columns)
        files[self.path] = text if code is None else code
        return Submission.from_files(files)


@dataclass(frozen=True)
class TextSubmission:
    """The completion's whole visible text as the file ``path``, plus files from the row.

    ``files_from_columns`` as for ``CodeBlockSubmission``.
    """

    path: str = "answer.txt"
    files_from_columns: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_paths(self.path, self.files_from_columns)

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns every row must have."""
        return tuple(self.files_from_columns.values())

    def __call__(self, sample: Sample) -> Submission:
        files = _row_files(sample, self.files_from_columns)
        files[self.path] = sample.text
        return Submission.from_files(files)
