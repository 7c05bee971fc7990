"""Shared fixtures: jobs scored through the public ``score_job`` path."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chalk_client import JobResult, ScoringJob
from chalk_worker import score_job


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slow",
        action="store_true",
        help="run the tests marked slow too (skipped locally by default; CI=true runs them all)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Local runs stay quick; CI (CI=true, as .ci/run sets) runs every test.
    if config.getoption("--slow") or os.environ.get("CI") == "true":
        return
    skip = pytest.mark.skip(reason="slow: run with --slow (CI=true runs every test)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


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
