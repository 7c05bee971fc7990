"""Executable judges: every rule of the reference, plus our timeout and cleanup."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from support import survivors

from chalk_client import ChalkSettings, JobStatus, ScoringJob, Submission
from chalk_client.judges import ExecutableJudge
from chalk_client.scoring import ZeroCause
from chalk_worker import score_job

# Every rule holds whether a {python} script starts warm (forked) or cold.
pytestmark = pytest.mark.usefixtures("python_start")

EXAMPLE = ["{python}", "-m", "tasks.example_task.scoring_script", "{submission}", "score.txt"]
WRITE = """
import json, sys
out = sys.argv[-1]
def write(obj):
    with open(out, "w") as f:
        f.write(obj if isinstance(obj, str) else json.dumps(obj))
"""


def run_script(score, script, body, *args, **judge):
    path = script(WRITE + body)
    return score(judge=ExecutableJudge(["{python}", path, *args, "out.json"], **judge))


@pytest.mark.parametrize(("answer", "expected"), [("Python 3.12.11\n", 1.0), ("3.11.2", 0.0)])
def test_example_task_scores_the_answer(score, answer, expected):
    result = score(
        judge=ExecutableJudge(EXAMPLE),
        submission=Submission.from_files({"answer.txt": answer}),
        submission_paths=["answer.txt"],
    )
    assert result.status is JobStatus.SUCCEEDED
    assert result.scoring.score == expected
    assert result.scoring.continue_task  # the default threshold, -1, lets 0 continue
    assert result.cause is (ZeroCause.SCRIPT_ZERO if expected == 0 else None)


def test_output_file_is_the_last_argument_in_a_fresh_folder_deleted_after(score, script):
    result = run_script(
        score,
        script,
        """
import os
folder = os.path.dirname(out)
write({"score": 1, "metadata": {"out": out, "listing": sorted(os.listdir(folder))}})
""",
    )
    out = Path(result.scoring.metadata["out"])
    assert out.name == "out.json" and out.is_absolute()
    assert result.scoring.metadata["listing"] == "[]"  # the folder was fresh and empty
    assert not out.parent.exists()


def test_metadata_values_become_strings_and_output_is_added(score, script):
    result = run_script(
        score,
        script,
        """
print("to stdout")
print("to stderr", file=sys.stderr)
write({"score": 0.5, "metadata": {"n": 3, "flag": True, "list": [1, 2], "s": "x"}})
""",
    )
    metadata = result.scoring.metadata
    assert result.scoring.score == 0.5
    assert metadata["n"] == "3" and metadata["flag"] == "True" and metadata["s"] == "x"
    assert json.loads(metadata["list"]) == [1, 2]
    assert metadata["stdout"] == "to stdout\n" and metadata["stderr"] == "to stderr\n"


def test_captured_output_is_truncated_to_64_kib(score, script):
    result = run_script(
        score,
        script,
        """
sys.stdout.write("o" * 300_000)
sys.stderr.write("e" * 300_000)
write({"score": 1, "metadata": {}})
""",
    )
    for stream, char in (("stdout", "o"), ("stderr", "e")):
        text = result.scoring.metadata[stream]
        assert text.startswith(char * 65536) and char * 65537 not in text
        assert "more bytes not kept" in text


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ('write({"score": 1})', "both"),
        ('write({"metadata": {}})', "both"),
        ('write("not json {")', "not valid JSON"),
        ('write("[1, 2]")', "both"),
        ('write({"score": "high", "metadata": {}})', "finite number"),
        ('write({"score": 1, "metadata": "x"})', "object"),
        ("pass", "did not write"),
        ('write({"score": 1, "metadata": {}}); sys.exit(3)', "status 3"),
        ('write({"score": 1, "metadata": {}}); sys.exit(137)', "exited with status 137"),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "SIGKILL"),
        ('write({"score": 10 ** 400, "metadata": {}})', "an integer of 401 digits"),
        ('write({"score": float("inf"), "metadata": {}})', "finite number"),
        ('write("[" * 100000)', "nested too deeply"),
    ],
)
def test_every_broken_script_scores_zero_and_stops(score, script, body, reason):
    result = run_script(score, script, body)
    assert result.status is JobStatus.SUCCEEDED
    assert result.scoring.score == 0.0 and result.scoring.continue_task is False
    assert reason in result.scoring.metadata["error"]
    # The grader's failure, not the student's zero: told apart, the metadata unchanged.
    assert result.cause is ZeroCause.GRADER_ERROR and result.grader_error
    assert set(result.scoring.metadata) == {"error", "stdout", "stderr"}


def test_missing_executable_scores_zero_and_stops(score):
    result = score(judge=ExecutableJudge(["/no/such/program", "out.json"]))
    assert result.status is JobStatus.SUCCEEDED
    assert result.scoring.score == 0.0 and not result.scoring.continue_task
    assert "/no/such/program" in result.scoring.metadata["error"]
    assert result.cause is ZeroCause.GRADER_ERROR


def test_stdin_is_empty(score, script):
    result = run_script(
        score,
        script,
        'write({"score": 1, "metadata": {"stdin": repr(sys.stdin.read())}})',
        timeout_s=20,
    )
    assert result.scoring.metadata["stdin"] == "''"


@pytest.mark.parametrize(
    ("value", "threshold", "continues"),
    [(0.5, 0.6, False), (0.6, 0.6, True), (-1, -1.0, True), (-1.5, -1.0, False)],
)
def test_continue_threshold(score, script, value, threshold, continues):
    result = run_script(
        score,
        script,
        f'write({{"score": {value}, "metadata": {{}}}})',
        continue_threshold=threshold,
    )
    assert result.scoring.score == value and result.scoring.continue_task is continues


def test_cwd_sets_the_working_directory(score, script, tmp_path):
    body = 'import os; write({"score": 1, "metadata": {"cwd": os.getcwd()}})'
    tmp_path.chmod(0o700)
    closed = run_script(score, script, body, cwd=str(tmp_path))
    assert closed.scoring.score == 0 and "chmod o+rx" in closed.scoring.metadata["error"]
    tmp_path.chmod(0o755)  # scripts run as an unprivileged user: the folder must let them in
    result = run_script(score, script, body, cwd=str(tmp_path))
    assert result.scoring.metadata["cwd"] == str(tmp_path)
    missing = run_script(score, script, body, cwd=str(tmp_path / "nope"))
    assert missing.scoring.score == 0 and "does not exist" in missing.scoring.metadata["error"]


def test_a_relative_command_is_found_from_cwd_not_from_the_worker(score, tmp_path, monkeypatch):
    tmp_path.chmod(0o755)
    run = tmp_path / "run.sh"
    run.write_text('#!/bin/sh\necho \'{"score": 1, "metadata": {}}\' > "$1"\n')
    run.chmod(0o755)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the worker's own folder has no run.sh
    result = score(judge=ExecutableJudge(["./run.sh", "out.json"], cwd=str(tmp_path)))
    assert result.scoring.score == 1.0, result.scoring.metadata
    missing = score(judge=ExecutableJudge(["./nope.sh", "out.json"], cwd=str(tmp_path)))
    assert "could not start './nope.sh'" in missing.scoring.metadata["error"]


def test_placeholders_name_interpreter_and_submission(score, script):
    path = script(
        WRITE
        + """
import os
python, first, folder = sys.argv[1:4]
write({"score": 1, "metadata": {
    "python": python, "first": open(first).read(), "listing": sorted(os.listdir(folder))}})
"""
    )
    import sys

    result = score(
        judge=ExecutableJudge(
            ["{python}", path, "{python}", "{submission}", "{submission_dir}", "out.json"]
        ),
        submission=Submission.from_files({"b.txt": "B", "a.txt": "A"}),
        submission_paths=["b.txt", "a.txt"],
    )
    metadata = result.scoring.metadata
    assert metadata["python"] == sys.executable
    assert metadata["first"] == "B"
    assert metadata["listing"] == json.dumps(["a.txt", "b.txt"])


def test_a_path_the_student_never_wrote_is_passed_anyway(score, script):
    reads = script("import sys; from pathlib import Path; Path(sys.argv[1]).read_text()")
    result = score(
        judge=ExecutableJudge(["{python}", reads, "{submission}", "out.json"]),
        submission_paths=["answer.txt"],
    )
    # A script that does not check crashes: the step scores 0, a grader error.
    assert result.status is JobStatus.SUCCEEDED
    assert result.scoring.score == 0 and not result.scoring.continue_task
    assert "FileNotFoundError" in result.scoring.metadata["stderr"]
    assert result.cause is ZeroCause.GRADER_ERROR
    # The example task's script checks: the student's zero, saying what was missing.
    checked = score(judge=ExecutableJudge(EXAMPLE), submission_paths=["answer.txt"])
    assert checked.score == 0 and checked.scoring.metadata["missing"] == "answer.txt"
    assert checked.cause is ZeroCause.SCRIPT_ZERO


def test_timeout_scores_zero_with_the_reason(score, script):
    started = time.monotonic()
    result = run_script(score, script, "import time; time.sleep(60)", timeout_s=1)
    assert time.monotonic() - started < 20
    assert result.scoring.score == 0 and not result.scoring.continue_task
    assert "timed out" in result.scoring.metadata["error"]
    assert result.cause is ZeroCause.TIMEOUT and not result.grader_error


def no_survivors(marker: str, wait_s: float = 5.0) -> bool:
    deadline = time.monotonic() + wait_s
    while survivors(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not survivors(marker)


def test_every_process_the_script_started_is_killed(score, script):
    marker = f"300.{os.getpid()}{time.monotonic_ns() % 10**9}"
    result = run_script(
        score,
        script,
        f"""
import os, subprocess, time
# A child in our group, one that left it with setsid, and a double-forked daemon.
subprocess.Popen(["sleep", "{marker}"])
subprocess.Popen(["setsid", "sleep", "{marker}"])
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "{marker}"])
    os._exit(0)
time.sleep(0.3)
write({{"score": 1, "metadata": {{}}}})
""",
    )
    assert result.scoring.score == 1
    assert no_survivors(marker)


def test_processes_are_killed_after_a_timeout_too(score, script):
    marker = f"300.{os.getpid()}{time.monotonic_ns() % 10**9}"
    result = run_script(
        score,
        script,
        f"""
import subprocess, time
subprocess.Popen(["setsid", "sleep", "{marker}"])
time.sleep(300)
""",
        timeout_s=1,
    )
    assert "timed out" in result.scoring.metadata["error"]
    assert no_survivors(marker)


def test_the_worker_s_secrets_are_not_in_the_script_s_environment(score, script, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    monkeypatch.setenv("CHALK_REDIS_URL", "redis://:password@host/0")
    result = run_script(
        score, script, 'import os; write({"score": 1, "metadata": dict(os.environ)})'
    )
    metadata = result.scoring.metadata
    assert "OPENAI_API_KEY" not in metadata and "CHALK_REDIS_URL" not in metadata
    assert "sk-secret-value" not in json.dumps(metadata)


def test_allowlist_refuses_other_commands_as_a_failure():
    settings = ChalkSettings(allowed_commands=["{python} -m tasks."])
    refused = score_job(
        ScoringJob(judge=ExecutableJudge(["/bin/sh", "-c", "echo hi", "out.json"])),
        settings=settings,
    )
    assert refused.status is JobStatus.FAILED and "not allowed" in refused.error
    sneaky = score_job(
        ScoringJob(judge=ExecutableJudge(["{python}", "-m", "tasks.../../x", "out.json"])),
        settings=settings,
    )
    assert sneaky.status is JobStatus.FAILED
    allowed = score_job(
        ScoringJob(
            judge=ExecutableJudge(EXAMPLE),
            submission=Submission.from_files({"answer.txt": "3.12.11"}),
        ),
        settings=settings,
    )
    assert allowed.status is JobStatus.SUCCEEDED and allowed.scoring.score == 1


def test_allowlist_cannot_be_bypassed_by_running_in_the_submission():
    # `python -m tasks.x` looks in its working folder first: with cwd in the submission,
    # a student's own `tasks` package would run in place of the allowed one.
    settings = ChalkSettings(allowed_commands=["{python} -m tasks."])
    evil = (
        "import json, sys\n"
        'json.dump({"score": 1, "metadata": {"pwned": "yes"}}, open(sys.argv[-1], "w"))\n'
    )
    job = ScoringJob(
        judge=ExecutableJudge(["{python}", "-m", "tasks.evil", "o.json"], cwd="{submission_dir}"),
        submission=Submission.from_files({"tasks/__init__.py": "", "tasks/evil.py": evil}),
    )
    refused = score_job(job, settings=settings)
    assert refused.status is JobStatus.FAILED, refused.scoring
    assert "inside the student's submission" in (refused.error or "")
    unrestricted = score_job(job)  # without an allowlist the job's author may do this
    assert unrestricted.status is JobStatus.SUCCEEDED


def test_allowlist_from_the_environment(monkeypatch):
    monkeypatch.setenv("CHALK_ALLOWED_COMMANDS", "{python} -m tasks., /usr/bin/true")
    assert ChalkSettings().allowed_commands == ["{python} -m tasks.", "/usr/bin/true"]


def test_no_job_folder_is_left_behind(score, tmp_path, monkeypatch):
    monkeypatch.setenv("CHALK_WORK_DIR", str(tmp_path))
    score(
        judge=ExecutableJudge(EXAMPLE),
        submission=Submission.from_files({"answer.txt": "3.12.11"}),
    )
    assert os.listdir(tmp_path) == []


def test_a_folder_holding_the_work_folder_shows_no_other_run_s_scratch(tmp_path, monkeypatch):
    # The command names a folder that holds the work folder: shown read-only, it would
    # carry the mounts below it, such as another run's scratch space. The run sees the
    # work folder empty but for its own job's folder.
    from chalk_worker.sandbox import detect_layers

    layers = detect_layers()
    if not (layers.root and layers.bwrap):
        pytest.skip("needs root and bubblewrap")
    project = tmp_path / "project"
    (project / "work").mkdir(parents=True)
    project.chmod(0o755)
    (project / "work").chmod(0o755)
    other = project / "work" / "chalk-job-1-other" / "judge-x"
    other.mkdir(parents=True, mode=0o755)
    subprocess.run(["mount", "-t", "tmpfs", "other-run", str(other)], check=True)
    try:
        (other / "secret").write_text("another run's")
        lister = project / "lister.py"
        lister.write_text(
            "import json, os, sys\n"
            "work = os.path.join(sys.argv[1], 'work')\n"
            "mounts = open('/proc/self/mountinfo').read()\n"
            "meta = {'listing': sorted(os.listdir(work)), 'other': 'other-run' in mounts}\n"
            "json.dump({'score': 1, 'metadata': meta}, open(sys.argv[-1], 'w'))\n"
        )
        lister.chmod(0o644)
        link = tmp_path / "work-link"  # the work folder named through a link
        link.symlink_to(project / "work")
        cases = [(project / "work", "true"), (project / "work", "false"), (link, "false")]
        for work, warm in cases:
            monkeypatch.setenv("CHALK_WORK_DIR", str(work))
            monkeypatch.setenv("CHALK_WARM_PYTHON", warm)
            command = ["{python}", str(lister), str(project), "o"]
            result = score_job(ScoringJob(judge=ExecutableJudge(command)))
            assert result.status is JobStatus.SUCCEEDED and result.score == 1.0, result
            listing = json.loads(result.scoring.metadata["listing"])
            assert "chalk-job-1-other" not in listing, listing
            if work != link:  # through the link, its own folder is there, not here
                assert len(listing) == 1 and listing[0].startswith("chalk-job-"), listing
            assert result.scoring.metadata["other"] == "False"
    finally:
        subprocess.run(["umount", str(other)], check=True)


def test_bubblewrap_shows_a_hidden_folder_empty_under_the_run_s_own_paths(tmp_path):
    from chalk_worker.sandbox.bwrap import view_entries

    project = tmp_path / "project"
    scratch = project / "work" / "chalk-job-1-a" / "judge-x"
    scratch.mkdir(parents=True)
    entries = view_entries(
        readonly=[project], writable=[scratch], tmp_bytes=1024, hide=project / "work"
    )
    steps = [(kind, path) for kind, path, _ in entries]
    at = steps.index(("ro", str(project)))
    assert steps[at + 1 :] == [
        ("tmpfs", str(project / "work")),
        ("dir", str(project / "work" / "chalk-job-1-a")),
        ("rw", str(scratch)),
    ]


def test_scripts_import_the_workers_own_task_and_client_packages(score, script):
    import chalk_client
    import tasks

    body = """
import chalk_client, tasks
write({"score": 1, "metadata": {"tasks": tasks.__path__[0], "client": chalk_client.__path__[0]}})
"""
    result = run_script(score, script, body)
    assert result.score == 1.0, result
    assert Path(result.scoring.metadata["tasks"]).resolve() == Path(tasks.__path__[0]).resolve()
    client = Path(result.scoring.metadata["client"]).resolve()
    assert client == Path(chalk_client.__path__[0]).resolve()


def test_the_package_folders_go_on_pythonpath_unless_python_finds_the_same_ones(monkeypatch):
    from chalk_worker.sandbox import bwrap
    from chalk_worker.sandbox.environment import script_env

    real = {name: bwrap._package_dir(name) for name in ("tasks", "chalk_client")}
    roots = bwrap.import_roots()
    assert roots and all(str(path.parent) in roots for path in real.values() if path)
    # A worker run from a checkout while another copy is installed: the copy it runs goes first.
    assert not bwrap._found_alike({**real, "tasks": Path("/nonexistent/checkout/tasks")})
    monkeypatch.delenv("PYTHONPATH", raising=False)
    alike = bwrap._found_alike(real)
    home = Path("/tmp/home")
    own = script_env(home, isolated=True, own_python=True).get("PYTHONPATH", "")
    assert own.split(os.pathsep) == ([""] if alike else list(roots))
    # Another interpreter (`python3 ...`, a shell script's) gets the folders whatever happens.
    other = script_env(home, isolated=True).get("PYTHONPATH", "")
    assert other.split(os.pathsep) == list(roots)
    # A worker given a PYTHONPATH keeps the folders first, then its entries, made absolute
    # as the worker reads them (the script's cwd may be the submission).
    monkeypatch.setenv("PYTHONPATH", ".:/srv/lib")
    given = script_env(home, isolated=True, own_python=True)["PYTHONPATH"]
    assert given.split(os.pathsep) == [*roots, os.getcwd(), "/srv/lib"]


def test_packages_reached_through_a_link_keep_their_folders_on_pythonpath(tmp_path, monkeypatch):
    from chalk_worker.sandbox import bwrap

    real = bwrap._package_dir("tasks")
    assert real is not None
    link = tmp_path / "link"
    link.symlink_to(real.parent)
    # Found as named, through the link (a .pth naming it, say), which the sandbox never shows.
    monkeypatch.setattr(bwrap, "_found_by_new_python", lambda names: {"tasks": str(link / "tasks")})
    assert not bwrap._found_alike({"tasks": real})
    monkeypatch.setattr(bwrap, "_found_by_new_python", lambda names: {"tasks": str(real)})
    assert bwrap._found_alike({"tasks": real})


def test_a_relative_pythonpath_of_the_worker_never_lets_a_submission_shadow_tasks(
    score, script, monkeypatch
):
    import tasks

    # The worker started with PYTHONPATH=. (its own folder); the script runs in the
    # submission's folder, where the student put a `tasks` package of their own.
    monkeypatch.setenv("PYTHONPATH", ".")
    body = "import tasks\nwrite({'score': 1, 'metadata': {'tasks': tasks.__path__[0]}})\n"
    command = ["{python}", script(WRITE + body), "out.json"]
    result = score(
        judge=ExecutableJudge(command, cwd="{submission_dir}"),
        submission=Submission.from_files({"tasks/__init__.py": "raise SystemExit(3)\n"}),
    )
    assert result.score == 1.0, result
    assert Path(result.scoring.metadata["tasks"]).resolve() == Path(tasks.__path__[0]).resolve()


def test_a_relative_pythonpath_of_the_worker_never_reaches_into_the_submission(
    score, script, monkeypatch
):
    monkeypatch.setenv("PYTHONPATH", ".")
    body = """
try:
    import planted
except ImportError:
    write({"score": 1, "metadata": {}})
"""
    command = ["{python}", script(WRITE + body), "out.json"]
    result = score(
        judge=ExecutableJudge(command, cwd="{submission_dir}"),
        submission=Submission.from_files({"planted.py": "raise SystemExit(3)\n"}),
    )
    assert result.score == 1.0, result


def test_paths_shown_beside_the_packages_keep_their_folder_on_pythonpath():
    from chalk_worker.sandbox import bwrap

    root = Path(bwrap.import_roots()[0])
    # Allowlisted (or named) next to `tasks`: a script may import it by the folder's place
    # on PYTHONPATH, as before the folders could be left out.
    assert bwrap.beside_packages([root / "grading"])
    assert bwrap.beside_packages([root])
    assert not bwrap.beside_packages([Path("/srv/elsewhere"), root.parent / "other"])
