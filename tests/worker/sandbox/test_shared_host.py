"""Several Chalk processes on one machine share the sandbox slots and their cgroups.

Each process claims slots in turn; whatever a slot owns on the machine (its
cgroups) is made when missing and removed only by a process that holds the
slot. Here one process scores scripts while another, using the same slots,
scores some and exits: the survivor's next scripts still run, capped.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chalk_client import ChalkSettings, JobStatus, ScoringJob, Submission
from chalk_client.judges import ExecutableJudge
from chalk_worker import score_job
from chalk_worker.sandbox import detect_layers

LAYERS = detect_layers()
needs_cgroups = pytest.mark.skipif(
    not {"user", "memory"} <= set(LAYERS.available) and os.environ.get("CI") != "true",
    reason="needs root and writable memory cgroups (CI has them)",
)


def script_job(job_id: str, body: str, **limits: int) -> ScoringJob:
    code = "import json, sys\n" + textwrap.dedent(body)
    code += "\nopen(sys.argv[-1], 'w').write(json.dumps({'score': 1.0, 'metadata': {}}))\n"
    return ScoringJob(
        id=job_id,
        judge=ExecutableJudge(["{python}", "-c", code, "out.json"], timeout_s=60),
        submission=Submission.from_files({"a.txt": "x"}),
        limits=limits or None,
    )


@pytest.fixture
def slots_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Two slots of this test's own (own lock folder, uids apart from other runs)."""
    env = {
        "CHALK_SANDBOX_LOCK_DIR": str(tmp_path / "locks"),
        "CHALK_SANDBOX_UID_BASE": str(63000 + (os.getpid() % 500) * 2),
        "CHALK_SANDBOX_SLOTS": "2",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@needs_cgroups
def test_a_process_leaving_does_not_break_the_slots_of_one_that_stays(slots_env):
    settings = ChalkSettings()
    for i in range(4):  # both slots used: this process holds a handle on their cgroups
        assert score_job(script_job(f"before-{i}", "pass"), settings=settings).score == 1.0

    # Another process scores on the same slots, then exits and cleans up what it may.
    other = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                from chalk_client import ScoringJob, Submission
                from chalk_client.judges import ExecutableJudge
                from chalk_worker import score_job
                for i in range(4):
                    job = ScoringJob(
                        id=f"other-{i}",
                        judge=ExecutableJudge(["{python}", "-c", "import json, sys; "
                            "open(sys.argv[-1], 'w').write(json.dumps("
                            "{'score': 1.0, 'metadata': {}}))", "out.json"]),
                        submission=Submission.from_files({"a.txt": "x"}),
                    )
                    assert score_job(job).score == 1.0, score_job(job)
                """
            ),
        ],
        env={**os.environ, **slots_env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert other.returncode == 0, other.stderr

    # This process goes on: every script runs, and the memory cap still holds.
    for i in range(4):
        result = score_job(script_job(f"after-{i}", "pass"), settings=settings)
        assert result.status is JobStatus.SUCCEEDED and result.score == 1.0, result
    hog = score_job(
        script_job("hog", "blocks = [bytearray(1 << 20) for _ in range(400)]", memory_mb=128),
        settings=settings,
    )
    assert hog.status is JobStatus.SUCCEEDED and hog.score == 0.0
    assert "ran out of memory" in hog.scoring.metadata["error"]


@needs_cgroups
def test_a_slot_held_by_another_process_keeps_its_cgroups_when_this_one_cleans_up(
    slots_env, tmp_path
):
    from chalk_worker.sandbox.session import Sandbox

    settings = ChalkSettings()
    mine = Sandbox(settings)
    assert mine.pool is not None
    with mine.pool.claim() as slot:
        groups = mine.cgroups_for(slot)
        assert groups is not None
        groups.ensure()
        made = list(groups.folders)
    assert made and all(folder.is_dir() for folder in made)

    # Another process holds that slot (its lock) while this one cleans up: nothing removed.
    lock = Path(slots_env["CHALK_SANDBOX_LOCK_DIR"]) / f"slot-{slot.number}.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import fcntl, os, sys, time; fd = os.open({str(lock)!r}, os.O_RDWR); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        mine.close()
        assert all(folder.is_dir() for folder in made)
    finally:
        holder.communicate("", timeout=10)

    # Free again: the one who can prove nobody uses the slot removes its groups.
    mine.cgroups_for(slot)
    mine.close()
    assert not any(folder.exists() for folder in made)
