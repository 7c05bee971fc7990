"""A ``tests`` judge's test cases: inline, or read one at a time from a JSONL file.

``tests_file`` names a file of the grader's, below the folder of the ``tasks``
package (``tasks/my_task/tests.jsonl``), or one in the student's submission
(``{submission_dir}/tests.jsonl``). Either way the path must lead to a regular
file inside that folder, links resolved. The file is read line by line as the
tests run: a thousand tests of 10 MB are never all in memory.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError

from chalk_client.judge_specs import TestsJudge
from chalk_client.program_tests import TestCase
from chalk_worker.sandbox.bwrap import import_roots

SUBMISSION = "{submission_dir}/"


class TestsFileError(Exception):
    """Raised when a tests file cannot be found or read: the grader's problem, not the student's."""

    __test__ = False


def tests_file_path(name: str, submission_dir: Path) -> Path:
    """Where ``tests_file`` points, checked to stay inside its folder."""
    if name.startswith(SUBMISSION):
        return _inside(submission_dir, name[len(SUBMISSION) :], "the submission")
    for root in import_roots():
        tasks = Path(root) / "tasks"
        if name.startswith("tasks/") and tasks.is_dir():
            return _inside(tasks, name[len("tasks/") :], "the tasks folder")
    raise TestsFileError(
        f"tests_file {name!r} is neither below tasks/ (tasks/my_task/tests.jsonl) nor in the "
        "submission ({submission_dir}/tests.jsonl)"
    )


def _inside(folder: Path, relative: str, where: str) -> Path:
    path = folder / relative
    real, root = os.path.realpath(path), os.path.realpath(folder)
    if not real.startswith(root + os.sep):
        raise TestsFileError(f"tests_file {relative!r} leads out of {where}")
    if not os.path.isfile(real):
        raise TestsFileError(f"tests_file {relative!r} is not a file in {where}")
    return Path(real)


def test_cases(judge: TestsJudge, submission_dir: Path) -> Iterator[TestCase]:
    """The judge's test cases, in order; a tests file's read as they are needed."""
    if judge.tests is not None:
        yield from judge.tests
        return
    assert judge.tests_file is not None
    path = tests_file_path(judge.tests_file, submission_dir)
    with path.open("rb") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                yield TestCase.model_validate_json(line)
            except ValidationError as exc:
                problem = exc.errors()[0]
                where = ".".join(str(part) for part in problem["loc"]) or "the line"
                raise TestsFileError(
                    f"tests_file line {number}: {where}: {problem['msg']} (each line is one "
                    '{"stdin": ..., "stdout": ...} object)'
                ) from None
