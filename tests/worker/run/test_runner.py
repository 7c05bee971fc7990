"""The job runner: steps in order, the job's score, misbehaviour and failures."""

from __future__ import annotations

import asyncio
import io
import os
import tarfile
from pathlib import Path

from support import say

from chalk_client import JobStatus, Scoring, ScoringJob, Step, Submission
from chalk_client.judges import (
    AlwaysPassJudge,
    CustomJudge,
    ExecutableJudge,
    Judge,
    RegexJudge,
    register_judge,
)
from chalk_worker import score_job, score_job_async


def test_steps_run_in_order_and_stop_after_one_that_does_not_continue(score):
    result = score(
        transcript=say("hello"),
        steps=[
            Step(AlwaysPassJudge()),
            Step(RegexJudge(["absent"])),
            Step(CustomJudge("never_reached_and_unregistered")),
        ],
    )
    assert result.status is JobStatus.SUCCEEDED
    assert [s.score for s in result.steps] == [1.0, 0.0]
    assert result.scoring == result.steps[-1]  # the run's score is the last scored step's


def test_the_job_score_is_the_last_step_s_even_when_lower(score):
    result = score(
        transcript=say("x"),
        steps=[Step(AlwaysPassJudge()), Step(RegexJudge(["y"]) | RegexJudge(["x"]))],
    )
    assert [s.score for s in result.steps] == [1.0, 1.0]
    result = score(
        transcript=say("x"), steps=[Step(RegexJudge(["x"])), Step(RegexJudge(["x", "z"]))]
    )
    assert result.score == 0.0


def test_each_step_gets_its_own_submission_paths(score, script):
    show = script(
        "import json, sys\n"
        "open(sys.argv[-1], 'w').write(json.dumps("
        "{'score': 1, 'metadata': {'text': open(sys.argv[1]).read()}}))\n"
    )
    judge = ExecutableJudge(["{python}", show, "{submission}", "out.json"])
    result = score(
        submission=Submission.from_files({"one.txt": "1", "two.txt": "2"}),
        submission_paths=["one.txt"],
        steps=[Step(judge), Step(judge, ["two.txt"])],
    )
    assert [s.metadata["text"] for s in result.steps] == ["1", "2"]


def test_without_paths_every_submitted_file_is_passed_in_order(score, script):
    show = script(
        "import json, sys\n"
        "result = {'score': 1, 'metadata': {'first': sys.argv[1]}}\n"
        "open(sys.argv[-1], 'w').write(json.dumps(result))\n"
    )
    result = score(
        submission=Submission.from_files({"z.txt": "z", "a/b.txt": "b"}),
        judge=ExecutableJudge(["{python}", show, "{submission}", "out.json"]),
    )
    assert result.scoring.metadata["first"].endswith("/a/b.txt")


def test_submission_misbehaviour_scores_zero_without_crashing(score):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        link = tarfile.TarInfo("answer.txt")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/shadow"
        archive.addfile(link)
    result = score(
        submission=Submission.from_tar(buffer.getvalue()),
        steps=[Step(AlwaysPassJudge()), Step(AlwaysPassJudge())],
    )
    assert result.status is JobStatus.SUCCEEDED
    assert result.score == 0.0 and not result.scoring.continue_task
    assert "misbehavior" in result.scoring.metadata
    assert len(result.steps) == 1


def test_results_carry_id_metadata_timings_worker_and_attempts():
    result = score_job(
        ScoringJob(id="job-7", judge=AlwaysPassJudge(), metadata={"policy": "p", "seed": 3})
    )
    assert result.job_id == "job-7" and result.metadata == {"policy": "p", "seed": 3}
    assert {"collect", "judge", "total"} <= set(result.timings)
    assert result.attempts == 1 and result.worker


def test_a_job_without_id_gets_one():
    assert score_job(ScoringJob(judge=AlwaysPassJudge())).job_id


def test_failed_results_have_an_error_and_no_scoring(score):
    result = score(steps=[Step(AlwaysPassJudge()), Step(CustomJudge("unregistered_xyz"))])
    assert result.status is JobStatus.FAILED and result.scoring is None
    assert "unregistered_xyz" in result.error


def test_score_job_works_inside_a_running_event_loop():
    async def main():
        inner = score_job(ScoringJob(judge=AlwaysPassJudge()))
        outer = await score_job_async(ScoringJob(judge=AlwaysPassJudge()))
        return inner, outer

    inner, outer = asyncio.run(main())
    assert inner.score == outer.score == 1.0


def test_job_folders_of_dead_workers_are_swept(tmp_path, monkeypatch):
    import subprocess

    from chalk_client import ChalkSettings
    from chalk_worker.sandbox.workdirs import sweep_stale_job_dirs

    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f"chalk-job-{dead.pid}-abc"
    stale.mkdir()
    # A worker's in-memory area is a tmpfs (where it may mount), holding job folders
    # and their scripts' scratch spaces, each a tmpfs too.
    mount = ["mount", "-t", "tmpfs", "chalk", str(stale)]
    mounted = subprocess.run(mount, capture_output=True).returncode == 0
    scratch = stale / "0123abcd" / "judge-x"
    scratch.mkdir(parents=True)
    (stale / "0123abcd" / "submission").mkdir()
    if mounted:
        subprocess.run(["mount", "-t", "tmpfs", "chalk", str(scratch)], check=True)
    alive = tmp_path / f"chalk-job-{os.getpid()}-xyz"
    alive.mkdir()
    other = tmp_path / "not-ours"
    other.mkdir()
    assert sweep_stale_job_dirs(ChalkSettings(work_dir=str(tmp_path))) == 1
    assert not stale.exists() and alive.exists() and other.exists()
    if mounted:
        assert str(stale) not in Path("/proc/self/mounts").read_text()  # nor the scratch space


@register_judge("test_look_around")
class LookAroundJudge(Judge):
    """Reports, while scoring, what the work folder holds and where the submission is."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def evaluate(self, transcript):
        listing = sorted(os.listdir(self.folder))
        return Scoring(score=1, metadata={"listing": listing, "dir": str(self.submission_dir)})


def test_jobs_without_files_make_no_job_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("CHALK_WORK_DIR", str(tmp_path))
    look = CustomJudge("test_look_around", {"folder": str(tmp_path)})
    bare = score_job(ScoringJob(transcript=say("hi"), judge=RegexJudge(["hi"]) & look))
    assert bare.scoring.metadata["listing"] == "[]"
    assert not Path(bare.scoring.metadata["dir"]).exists()
    with_files = score_job(ScoringJob(judge=look, submission=Submission.from_files({"a": "1"})))
    assert with_files.scoring.metadata["listing"] != "[]"
    assert os.listdir(tmp_path) == []


def test_scripts_without_a_submission_see_an_empty_submission_folder(tmp_path, monkeypatch, script):
    # Scripts, regexes and passes only: the script's thread makes the job folder. With a
    # custom judge the folder is made before the first step. Scripts see the same either way.
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("CHALK_WORK_DIR", str(work))
    lister = script(
        "import json, os, sys\nlisting = os.listdir(sys.argv[1])\n"
        "json.dump({'score': 1, 'metadata': {'listing': listing}}, open(sys.argv[-1], 'w'))"
    )
    listing = ExecutableJudge(["{python}", lister, "{submission_dir}", "out.json"])
    look = CustomJudge("test_look_around", {"folder": str(work)})
    for steps in ([Step(listing), Step(RegexJudge(["hi"]) & listing)], [Step(look), Step(listing)]):
        result = score_job(ScoringJob(transcript=say("hi"), steps=steps))
        assert result.status is JobStatus.SUCCEEDED, result
        assert [s.score for s in result.steps] == [1.0, 1.0], result
        assert result.scoring.metadata["listing"] == "[]"
    assert os.listdir(work) == []  # both folders removed


def test_a_scratch_space_not_mounted_is_not_in_the_shared_in_memory_folder(
    tmp_path, monkeypatch, script
):
    # Jobs with nothing to unpack share one small tmpfs per process for their folders.
    # Where a script's scratch space cannot be mounted, its files would land there,
    # where a script could fill it for the other jobs: it goes in a folder of its own.
    from chalk_worker.sandbox import workdirs
    from chalk_worker.sandbox.session import Sandbox

    work = tmp_path / "work"
    work.mkdir(mode=0o755)
    monkeypatch.setenv("CHALK_WORK_DIR", str(work))
    where = script(
        "import json, os, sys\n"
        "json.dump({'score': 1, 'metadata': {'home': os.environ['HOME'], 'sub': sys.argv[1]}},"
        " open(sys.argv[-1], 'w'))"
    )
    command = ["{python}", where, "{submission_dir}", "out.json"]
    monkeypatch.setattr(Sandbox, "_mount_scratch", lambda self, scratch, size: False)
    result = score_job(ScoringJob(judge=ExecutableJudge(command)))
    assert result.status is JobStatus.SUCCEEDED and result.score == 1.0, result
    job_folder = Path(result.scoring.metadata["sub"]).parent
    home = Path(result.scoring.metadata["home"])
    if job_folder.parent != work:  # the job's folder was in this process's in-memory folder
        assert job_folder.parent.parent == work
        assert home.parent.parent == work and not home.is_relative_to(job_folder.parent), home
    assert os.listdir(work) == []  # all of it removed
    assert not workdirs.in_memory_area(job_folder)


def test_the_wait_for_a_sandbox_slot_is_timed_apart_within_judge(script):
    from chalk_worker.judges.executable import subprocess_slots
    from chalk_worker.run.embedded import score_stream

    sleeper = script(
        "import json, sys, time\ntime.sleep(0.4)\n"
        "json.dump({'score': 1, 'metadata': {}}, open(sys.argv[-1], 'w'))"
    )
    jobs = [
        ScoringJob(judge=ExecutableJudge(["{python}", sleeper, "out.json"]))
        for _ in range(2 * subprocess_slots() + 1)
    ]

    async def all_of_them() -> list:
        return [result async for result in score_stream(jobs)]

    results = asyncio.run(all_of_them())
    assert all(r.score == 1 for r in results)
    waits = [r.timings["sandbox_wait"] for r in results]
    assert all(0 <= r.timings["sandbox_wait"] <= r.timings["judge"] for r in results)
    # More scripts than slots: the last ones waited for two rounds of 0.4 s.
    assert max(waits) >= 0.7 and min(waits) < 0.2
    regex_only = score_job(ScoringJob(transcript=say("hi"), judge=RegexJudge(["hi"])))
    assert "sandbox_wait" not in regex_only.timings  # no script ran


def test_a_submission_made_in_memory_from_text_and_bytes(score, script):
    reader = script(
        "import json, sys\nfrom pathlib import Path\nroot = Path(sys.argv[1])\n"
        "json.dump({'score': 1, 'metadata': {'text': (root / 'answer.txt').read_text(), "
        "'bytes': list((root / 'data' / 'blob.bin').read_bytes())}}, open(sys.argv[-1], 'w'))"
    )
    submission = Submission.from_files({"answer.txt": "42\n", "data/blob.bin": b"\x00\xff\x10"})
    assert submission.tar is not None  # bytes: carried as an archive
    assert Submission.from_files({"answer.txt": "42\n"}).files == {"answer.txt": "42\n"}
    result = score(
        judge=ExecutableJudge(["{python}", reader, "{submission_dir}", "out.json"]),
        submission=submission,
    )
    assert result.scoring.metadata["text"] == "42\n"
    assert result.scoring.metadata["bytes"] == "[0, 255, 16]"
