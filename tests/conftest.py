"""Shared fixtures: jobs scored through the public ``score_job`` path."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chalk_client import JobResult, ScoringJob
from chalk_worker import score_job


@pytest.fixture
def score() -> Callable[..., JobResult]:
    """Score a job built from keyword arguments, as a worker would."""

    def run(**job: Any) -> JobResult:
        return score_job(ScoringJob(**job))

    return run


@pytest.fixture
def script(tmp_path: Path) -> Callable[[str], str]:
    """Write a Python scoring script to a file and return its path.

    Named in a command, the file is shown read-only to the sandboxed script.
    """
    count = 0

    def write(body: str) -> str:
        nonlocal count
        count += 1
        path = tmp_path / f"script_{count}.py"
        path.write_text(textwrap.dedent(body))
        path.chmod(0o755)
        return str(path)

    return write
