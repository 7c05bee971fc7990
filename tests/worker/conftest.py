"""Fixtures of the worker tests: both ways a ``{python}`` scoring script starts, and a
``chalk score`` process held inside a test-level cgroup for hostile jobs."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from chalk_client import JobResult, ScoringJob
from chalk_worker.sandbox.cgroup_support import own_cgroup


@pytest.fixture(params=["warm", "cold"])
def python_start(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test with warm Python on, then off (``CHALK_WARM_PYTHON``)."""
    mode = str(request.param)
    monkeypatch.setenv("CHALK_WARM_PYTHON", "true" if mode == "warm" else "false")
    return mode


@pytest.fixture(scope="module")
def test_cap() -> Iterator[list[Path]]:
    """Cgroups (memory 3 GiB, 2,048 processes) around every worker these tests start."""
    folders = []
    name = f"chalk-tests-{os.getpid()}"
    for controller, limit_file, limit in (
        ("memory", "memory.limit_in_bytes", str(3 << 30)),
        ("pids", "pids.max", "2048"),
    ):
        base = Path("/sys/fs/cgroup") / controller / own_cgroup(controller).lstrip("/")
        folder = base / name
        with contextlib.suppress(OSError):
            folder.mkdir(exist_ok=True)
            (folder / limit_file).write_text(limit)
            folders.append(folder)
    yield folders
    for folder in folders:
        for child in sorted(folder.rglob("*"), key=lambda p: -len(p.parts)):
            if child.is_dir():
                with contextlib.suppress(OSError):
                    child.rmdir()
        with contextlib.suppress(OSError):
            folder.rmdir()


def score_capped(
    jobs: list[ScoringJob], cap: list[Path], tmp_path: Path, **env: str
) -> dict[str, JobResult]:
    """Score ``jobs`` with ``chalk score`` in a worker process inside the test cap."""
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text("".join(job.model_dump_json() + "\n" for job in jobs))
    fds = [os.open(folder / "cgroup.procs", os.O_WRONLY) for folder in cap]

    def join() -> None:
        for fd in fds:
            os.write(fd, str(os.getpid()).encode())

    environment = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("CHALK_") or k == "CHALK_WARM_PYTHON"  # set by python_start
    }
    environment.update({"CHALK_SANDBOX_PATHS": str(tmp_path), **env})
    try:
        done = subprocess.run(
            [sys.executable, "-m", "chalk_client.cli", "score", str(rollouts)],
            capture_output=True,
            text=True,
            env=environment,
            preexec_fn=join,
            timeout=240,
        )
    finally:
        for fd in fds:
            os.close(fd)
    results = [JobResult.model_validate_json(line) for line in done.stdout.splitlines()]
    assert len(results) == len(jobs), done.stderr
    return {result.job_id: result for result in results}
