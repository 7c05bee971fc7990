"""The sandbox against hostile scripts: each case is contained, and the next job still scores.

Every hostile job runs through the real ``chalk score`` command in a process
placed in a test-level cgroup with memory and process caps, so a regression in
the sandbox cannot take the machine down. The slot cgroups the worker makes go
below that cap. Each run also scores a well-behaved job beside the hostile one.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tarfile
import textwrap
import time
from pathlib import Path

import archives
import pytest
from processes import score_capped
from support import STARTED_MARKER, WARM_PROBE

from chalk_client import JobResult, JobStatus, ScoringJob, Submission
from chalk_client.judges import ExecutableJudge
from chalk_client.scoring import ZeroCause
from chalk_worker.sandbox import SandboxLayers, detect_layers
from chalk_worker.sandbox.cgroup_support import CgroupSupport

LAYERS = detect_layers()
FULL = {"user", "namespaces", "network", "memory", "pids"} <= set(LAYERS.available)
needs_full_sandbox = pytest.mark.skipif(
    not FULL and os.environ.get("CI") != "true",
    reason="needs root, bubblewrap and writable cgroups (CI has them)",
)
GOOD = ScoringJob(
    id="good",
    judge=ExecutableJudge(
        ["{python}", "-m", "tasks.example_task.scoring_script", "{submission}", "score.txt"]
    ),
    submission=Submission.from_files({"answer.txt": "3.12.11"}),
)


def hostile(
    tmp_path: Path, body: str, *, timeout_s: float = 20, **limits: int | float
) -> ScoringJob:
    """A job whose scoring script is ``body``; ``write(obj)`` writes its output file."""
    tmp_path.chmod(0o755)
    path = tmp_path / f"hostile_{time.monotonic_ns()}.py"
    prelude = WARM_PROBE + (
        "import json, os, sys\ndef write(o):\n    open(sys.argv[-1], 'w').write(json.dumps(o))\n"
    )
    path.write_text(prelude + textwrap.dedent(body))
    path.chmod(0o644)
    return ScoringJob(
        id="hostile",
        judge=ExecutableJudge(["{python}", str(path), "out.json"], timeout_s=timeout_s),
        submission=Submission.from_files({"answer.txt": "student work"}),
        limits=limits or None,
    )


def command_of(job: ScoringJob) -> list[str]:
    """The command of a job whose judge is an executable judge."""
    assert isinstance(job.judge, ExecutableJudge)
    return job.judge.command


def survivors(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError), open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if marker.encode() in cmdline.read():
                    found.append(int(entry))
    return found


def assert_contained(results: dict[str, JobResult], marker: str | None = None) -> JobResult | None:
    """The good job scored normally; nothing the hostile one started is alive.

    The hostile script started as the test asked: warm or cold (``python_start``).
    """
    assert results["good"].status is JobStatus.SUCCEEDED and results["good"].score == 1.0
    hostile_result = results.get("hostile")
    if hostile_result is not None and hostile_result.scoring is not None:
        mode = "warm" if os.environ.get("CHALK_WARM_PYTHON") == "true" else "cold"
        assert STARTED_MARKER + mode in hostile_result.scoring.metadata["stderr"]
    if marker is not None:
        deadline = time.monotonic() + 5
        while survivors(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not survivors(marker)
    return results.get("hostile")


# Every hostile case is contained whether {python} scripts start warm (forked) or cold.
pytestmark = [needs_full_sandbox, pytest.mark.slow, pytest.mark.usefixtures("python_start")]


def test_probe_reports_every_layer_on_this_machine():
    report = "\n".join(LAYERS.report())
    for layer in ("user", "namespaces", "network", "memory", "pids", "kill", "rlimits"):
        assert f"sandbox layer {layer}: on" in report


def test_escapes_with_setsid_and_double_fork_are_killed(test_cap, tmp_path):
    marker = f"999.{time.monotonic_ns() % 10**9}"
    job = hostile(
        tmp_path,
        f"""
        import subprocess
        subprocess.Popen(["setsid", "sleep", "{marker}"])
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execvp("sleep", ["sleep", "{marker}"])
            os._exit(0)
        write({{"score": 1, "metadata": {{}}}})
        """,
    )
    result = assert_contained(score_capped([job, GOOD], test_cap, tmp_path), marker)
    assert result.score == 1.0


def test_fork_bomb_hits_the_process_cap(test_cap, tmp_path):
    job = hostile(
        tmp_path,
        """
        import time
        forks = 0
        for _ in range(500):
            try:
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
                forks += 1
            except OSError:
                break
        write({"score": 1, "metadata": {"forks": forks}})
        """,
        processes=64,
    )
    result = assert_contained(score_capped([job, GOOD], test_cap, tmp_path))
    assert result.status is JobStatus.SUCCEEDED
    assert 0 < int(result.scoring.metadata["forks"]) < 64
    assert not survivors(str(command_of(job)[1]))


def test_memory_hog_is_killed_at_its_limit(test_cap, tmp_path):
    job = hostile(
        tmp_path,
        """
        hoard = []
        while True:
            hoard.append(bytearray(16 * 1024 * 1024))
        """,
        memory_mb=192,
    )
    result = assert_contained(score_capped([job, GOOD], test_cap, tmp_path))
    assert result.score == 0.0 and not result.scoring.continue_task
    assert "ran out of memory (limit 192 MiB)" in result.scoring.metadata["error"]
    assert result.cause is ZeroCause.OUT_OF_MEMORY


def test_a_script_that_survives_its_childs_memory_hog_is_judged_by_its_file(test_cap, tmp_path):
    # The reference judges a script by its exit status and output file: a student
    # program killed for memory, handled by the script, is the script's business.
    job = hostile(
        tmp_path,
        """
        import subprocess
        hog = "hoard = []\\nwhile True: hoard.append(bytearray(16 * 1024 * 1024))"
        child = subprocess.run([sys.executable, "-c", hog])
        write({"score": 0.7, "metadata": {"child": child.returncode}})
        """,
        memory_mb=192,
    )
    result = assert_contained(score_capped([job, GOOD], test_cap, tmp_path))
    assert result.score == 0.7, result.scoring.metadata
    assert result.scoring.metadata["child"] == "-9"  # the child was killed for memory


def test_spinning_forever_is_timed_out(test_cap, tmp_path):
    job = hostile(
        tmp_path,
        """
        if os.fork() == 0:
            while True:
                pass
        while True:
            pass
        """,
        timeout_s=2,
    )
    started = time.monotonic()
    result = assert_contained(score_capped([job, GOOD], test_cap, tmp_path))
    assert time.monotonic() - started < 60
    assert "timed out" in result.scoring.metadata["error"]
    assert not survivors(str(command_of(job)[1]))


def test_secrets_cannot_be_read_from_proc(test_cap, tmp_path):
    job = hostile(
        tmp_path,
        """
        seen = []
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                for name in ("environ", "cmdline"):
                    try:
                        seen.append(open(f"/proc/{pid}/{name}", "rb").read().decode("latin-1"))
                    except OSError:
                        pass
        seen.append(json.dumps(dict(os.environ)))
        found = any("sk-chalk-test-secret" in text for text in seen)
        write({"score": 0 if found else 1, "metadata": {"pids": len(os.listdir("/proc"))}})
        """,
    )
    results = score_capped(
        [job, GOOD],
        test_cap,
        tmp_path,
        OPENAI_API_KEY="sk-chalk-test-secret",
        CHALK_RUBRIC_MODEL="sk-chalk-test-secret",
    )
    result = assert_contained(results)
    assert result.score == 1.0, "a sandboxed script read the worker's API key"
    assert "sk-chalk-test-secret" not in result.model_dump_json()


def test_no_network_not_even_loopback(test_cap, tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    job = hostile(
        tmp_path,
        f"""
        import socket
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=3)
            reached = "yes"
        except OSError as exc:
            reached = "no: " + str(exc)
        write({{"score": 1, "metadata": {{"reached": reached}}}})
        """,
    )
    result = assert_contained(score_capped([job, GOOD], test_cap, tmp_path))
    assert result.scoring.metadata["reached"].startswith("no")
    with pytest.raises(TimeoutError):
        listener.accept()
    listener.close()


def test_writing_4_gib_is_stopped(test_cap, tmp_path):
    job = hostile(
        tmp_path,
        """
        chunk = b"x" * (1 << 20)
        with open(os.path.join(os.environ["HOME"], "big"), "wb") as f:
            for _ in range(4096):
                f.write(chunk)
        write({"score": 1, "metadata": {}})
        """,
    )
    started = time.monotonic()
    result = assert_contained(score_capped([job, GOOD], test_cap, tmp_path))
    assert time.monotonic() - started < 60
    assert result.score == 0.0 and not result.scoring.continue_task


def test_printing_200_mb_keeps_64_kib(test_cap, tmp_path):
    job = hostile(
        tmp_path,
        """
        chunk = b"y" * (1 << 20)
        for _ in range(200):
            sys.stdout.buffer.write(chunk)
        sys.stdout.flush()
        write({"score": 1, "metadata": {}})
        """,
    )
    result = assert_contained(score_capped([job, GOOD], test_cap, tmp_path))
    stdout = result.scoring.metadata["stdout"]
    assert result.score == 1.0
    assert stdout.startswith("y" * 65536) and len(stdout) < 65536 + 200
    assert f"{200 * (1 << 20) - 65536} more bytes not kept" in stdout


def test_the_host_is_out_of_sight_and_the_submission_read_only(test_cap, tmp_path):
    job = hostile(
        tmp_path,
        """
        facts = {"uid": os.getuid(), "groups": os.getgroups()}
        for path in ("/etc/shadow", "/root/.bash_history"):
            try:
                open(path).read()
                facts[path] = "read"
            except OSError as exc:
                facts[path] = type(exc).__name__
        facts["root"] = sorted(os.listdir("/root")) if os.path.isdir("/root") else []
        answer = sys.argv[1] if len(sys.argv) > 2 else None
        try:
            open(os.environ["SUBMISSION"], "a").write("tampered")
            facts["submission"] = "written"
        except OSError as exc:
            facts["submission"] = type(exc).__name__
        write({"score": 1, "metadata": facts})
        """,
    )
    # Hand the script the submission's path through its environment-free argv.
    command_of(job).insert(2, "{submission}")
    script = Path(command_of(job)[1])
    script.write_text(
        script.read_text().replace('os.environ["SUBMISSION"]', "sys.argv[1]"), encoding="utf-8"
    )
    result = assert_contained(score_capped([job, GOOD], test_cap, tmp_path))
    facts = result.scoring.metadata
    assert int(facts["uid"]) >= 61000 and facts["groups"] == "[]"
    assert facts["/etc/shadow"] == "PermissionError"
    assert facts["/root/.bash_history"] in ("FileNotFoundError", "PermissionError")
    assert facts["root"] in ("[]", '[".pyenv"]')
    assert facts["submission"] in ("OSError", "PermissionError")


def test_strict_mode_refuses_a_machine_without_required_layers():
    from chalk_client import ChalkSettings
    from chalk_client.errors import ConfigurationError
    from chalk_worker.sandbox import Sandbox

    bare = SandboxLayers(
        root=False, bwrap=None, setpriv=None, cgroups=CgroupSupport(None, None, None)
    )
    with pytest.raises(ConfigurationError, match="namespaces"):
        Sandbox(ChalkSettings(sandbox_require=["namespaces"]), layers=bare)
    with pytest.raises(ConfigurationError, match="unknown sandbox layer"):
        Sandbox(ChalkSettings(sandbox_require=["moat"]), layers=bare)
    assert "memory" in bare.missing and "kill" in bare.missing
    json.dumps(bare.report())


def hostile_archives() -> dict[str, bytes]:
    """Each archive of the corpus, by what it tries."""
    ten_gib = b"\x80" + (10 * archives.GIB).to_bytes(11, "big")
    two_gib = b"\x80" + (2 * archives.GIB).to_bytes(11, "big")
    sparse_map = {386: b"\x80" + (10 * archives.GIB - 512).to_bytes(11, "big")}
    return {
        "absolute": archives.tar(archives.member(b"/etc/cron.d/evil", b"x")),
        "dotdot": archives.tar(archives.member(b"../../evil", b"x")),
        "symlink": archives.tar(archives.header(b"answer.txt", kind=b"2", linkname=b"/etc/shadow")),
        "hardlink": archives.tar(
            archives.header(b"answer.txt", kind=b"1", linkname=b"/etc/shadow")
        ),
        "fifo": archives.tar(archives.header(b"answer.txt", kind=b"6")),
        "device": archives.tar(archives.header(b"answer.txt", kind=b"3")),
        "gzip-bomb": archives.gzip_bomb(),
        "long-name": archives.header(b"././@LongLink", kind=b"L", size_field=two_gib) + bytes(4096),
        "sparse": archives.tar(
            archives.member(b"s.bin", b"x" * 512, kind=b"S", extra={483: ten_gib, **sparse_map})
        ),
        "many-files": archives.many_tiny_files(100_000),
        "deep": archives.build(
            {"d/" * depth: (None, 0o755) for depth in range(1, 2001)}, format=tarfile.PAX_FORMAT
        ),
        "not-an-archive": b"this is not a tar archive at all" * 100,
    }


def test_hostile_archives_score_zero_and_the_worker_goes_on(test_cap, tmp_path):
    setuid = archives.tar(archives.member(b"answer.txt", b"3.12.11", mode=0o6755))
    jobs = [
        ScoringJob(
            id=name,
            judge=GOOD.judge,
            submission=Submission.from_tar(archive),
            submission_paths=["answer.txt"],
        )
        for name, archive in hostile_archives().items()
    ]
    jobs.append(GOOD.model_copy(update={"id": "setuid", "submission": Submission.from_tar(setuid)}))
    results = score_capped([*jobs, GOOD], test_cap, tmp_path)
    assert_contained(results)
    for name in hostile_archives():
        result = results[name]
        assert result.status is JobStatus.SUCCEEDED, (name, result.error)
        assert result.score == 0.0 and not result.scoring.continue_task, name
        assert result.scoring.metadata["misbehavior"], name
    # Set-uid bits are dropped, not refused: the file is graded like any other.
    assert results["setuid"].score == 1.0
    assert not Path("/etc/cron.d/evil").exists()
    assert not (tmp_path.parent.parent / "evil").exists()
