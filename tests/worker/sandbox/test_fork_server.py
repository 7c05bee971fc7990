"""Attacks on the fork servers: a run cannot reach its server, nor leave anything to the next run.

Runs go through ``score_job`` with slots of these tests' own (own lock folder,
uids apart from other runs on the machine). One slot and runs one after the
other: each run takes the server the previous one gave back, so "the next run"
is a fork of the very server the attack aimed at. ``pool.started`` counts the
servers a pool started: unchanged means no server had to be replaced.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import subprocess
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from support import STARTED_MARKER, WARM_PROBE, starts

from chalk_client import ChalkSettings, JobResult, JobStatus, ScoringJob, Submission
from chalk_client.judges import ExecutableJudge
from chalk_worker import score_job
from chalk_worker.sandbox import detect_layers, get_sandbox
from chalk_worker.sandbox.servers import ForkServerPool

LAYERS = detect_layers()
pytestmark = pytest.mark.skipif(
    not {"user", "namespaces", "kill"} <= set(LAYERS.available) and os.environ.get("CI") != "true",
    reason="needs root and bubblewrap (CI has them)",
)
PRELUDE = WARM_PROBE + textwrap.dedent(
    """
    import json, os, sys
    facts = {}
    def write(score=1):
        with open(sys.argv[-1], "w") as out:
            json.dump({"score": score, "metadata": facts}, out)
    """
)


@pytest.fixture
def settings(tmp_path: Path) -> ChalkSettings:
    """Warm Python on, one slot of these tests' own."""
    return ChalkSettings(
        warm_python=True,
        sandbox_lock_dir=str(tmp_path / "locks"),
        sandbox_uid_base=64000 + (os.getpid() % 400) * 2,
        sandbox_slots=1,
        work_dir=str(tmp_path),
    )


def pool(settings: ChalkSettings) -> ForkServerPool:
    """The warm servers of this process for ``settings``."""
    servers = get_sandbox(settings).warm_servers()
    assert servers is not None, "warm servers are off on this machine"
    return servers


def run(settings: ChalkSettings, body: str, **limits: int) -> JobResult:
    """Score a warm ``{python} -c`` script; it fills ``facts`` and calls ``write()``."""
    code = PRELUDE + textwrap.dedent(body)
    job = ScoringJob(
        judge=ExecutableJudge(["{python}", "-c", code, "out.json"], timeout_s=30),
        submission=Submission.from_files({"a.txt": "x"}),
        limits=limits or None,
    )
    result = score_job(job, settings=settings)
    assert result.status is JobStatus.SUCCEEDED, result.error
    assert result.scoring is not None
    return result


def assert_warm(result: JobResult) -> dict[str, str]:
    """The run started warm and wrote its file; its facts."""
    assert result.scoring is not None
    metadata = result.scoring.metadata
    assert STARTED_MARKER + "warm" in metadata["stderr"], metadata
    assert result.score == 1.0, metadata
    return metadata


def survivors(marker: str) -> list[int]:
    """Host processes whose command line holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError), open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if marker.encode() in cmdline.read():
                    found.append(int(entry))
    return found


def test_a_run_cannot_signal_trace_or_write_to_its_server(settings):
    servers = pool(settings)
    assert_warm(run(settings, "write()"))
    started = servers.started
    attack = run(
        settings,
        """
        import ctypes, signal
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        parent = os.getppid()
        facts["self"] = os.getpid()
        facts["visible"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        for name, number in (("kill", signal.SIGKILL), ("stop", signal.SIGSTOP)):
            for target in (parent, 1):
                try:
                    os.kill(target, number)
                    facts[f"{name} {target}"] = "sent"
                except OSError as exc:
                    facts[f"{name} {target}"] = type(exc).__name__
        for name, request in (("attach", 16), ("seize", 0x4206)):
            ctypes.set_errno(0)
            done = libc.ptrace(ctypes.c_long(request), ctypes.c_long(parent), None, None)
            facts[f"ptrace {name}"] = f"{done} {os.strerror(ctypes.get_errno())}"
        try:
            with open(f"/proc/{parent}/mem", "r+b") as mem:
                mem.write(b"x")
            facts["mem"] = "written"
        except OSError as exc:
            facts["mem"] = type(exc).__name__
        buffer = ctypes.create_string_buffer(8)
        local = (ctypes.c_void_p * 2)(ctypes.addressof(buffer), 8)
        remote = (ctypes.c_void_p * 2)(0x400000, 8)
        ctypes.set_errno(0)
        long = ctypes.c_long
        done = libc.syscall(long(311), long(parent), local, long(1), remote, long(1), long(0))
        facts["vm_writev"] = f"{done} {os.strerror(ctypes.get_errno())}"
        try:
            os.kill(-1, signal.SIGKILL)  # every process this run may signal
            facts["kill -1"] = "sent"
        except OSError as exc:
            facts["kill -1"] = type(exc).__name__
        write()
        """,
    )
    facts = assert_warm(attack)
    assert facts["visible"] == f"[{facts['self']}]"  # its server and init are not even listed
    signalled = [key for key in facts if key.startswith(("kill ", "stop ")) and key != "kill -1"]
    assert len(signalled) == 4 and all(facts[key] == "PermissionError" for key in signalled)
    assert facts["ptrace attach"] == "-1 Operation not permitted"
    assert facts["ptrace seize"] == "-1 Operation not permitted"
    assert facts["mem"] in ("FileNotFoundError", "PermissionError")
    assert facts["vm_writev"] == "-1 Operation not permitted"  # process_vm_writev
    # kill(-1) succeeds once it *tried* a process, even when every one refused (EPERM):
    # that the server and its init survived is what counts, and the next runs show it.
    assert facts["kill -1"] in ("sent", "ProcessLookupError")
    # The server lived on: the next run is warm, on the same server.
    assert_warm(run(settings, "write()"))
    assert servers.started == started


def test_a_run_cannot_leave_its_root(settings):
    facts = assert_warm(
        run(
            settings,
            """
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            os.makedirs(os.path.join(os.environ["HOME"], "inner"), exist_ok=True)
            try:
                os.chroot(os.path.join(os.environ["HOME"], "inner"))
                facts["chroot"] = "done"
            except OSError as exc:
                facts["chroot"] = type(exc).__name__
            ctypes.set_errno(0)
            done = libc.unshare(ctypes.c_int(0x10000000))  # CLONE_NEWUSER
            facts["userns"] = f"{done} {os.strerror(ctypes.get_errno())}"
            ctypes.set_errno(0)
            done = libc.unshare(ctypes.c_int(0x00020000))  # CLONE_NEWNS
            facts["mountns"] = f"{done} {os.strerror(ctypes.get_errno())}"
            for _ in range(40):  # well above the root, were it escapable
                os.chdir("..")
            facts["top"] = sorted(os.listdir("."))
            facts["self root"] = os.readlink("/proc/self/root")
            with open("/proc/self/mountinfo") as table:
                facts["stage"] = any(".chalk-run" in line for line in table)
            write()
            """,
        )
    )
    assert facts["chroot"] == "PermissionError"
    assert facts["userns"] == "-1 Operation not permitted"
    assert facts["mountns"] == "-1 Operation not permitted"
    assert ".chalk-run" not in facts["top"] and "usr" in facts["top"]
    assert facts["self root"] == "/"
    assert facts["stage"] == "False"


def test_a_child_that_outlives_its_run_is_killed_and_unseen_by_the_next(settings):
    servers = pool(settings)
    marker = f"301.{os.getpid()}{time.monotonic_ns() % 10**9}"
    assert_warm(
        run(
            settings,
            f"""
            import subprocess
            subprocess.Popen(["sleep", "{marker}"])
            subprocess.Popen(["setsid", "sleep", "{marker}"])
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    os.execvp("sleep", ["sleep", "{marker}"])
                os._exit(0)
            write()
            """,
        )
    )
    started = servers.started
    assert not survivors(marker)
    facts = assert_warm(
        run(
            settings,
            f"""
            seen = []
            for pid in os.listdir("/proc"):
                if pid.isdigit() and int(pid) != os.getpid():
                    seen.append(open(f"/proc/{{pid}}/cmdline", "rb").read().decode())
            facts["others"] = seen
            facts["marker"] = any("{marker}" in line for line in seen)
            write()
            """,
        )
    )
    assert facts["others"] == "[]" and facts["marker"] == "False"
    assert servers.started == started


def test_module_state_changed_by_a_run_does_not_reach_the_next(settings):
    servers = pool(settings)
    assert_warm(
        run(
            settings,
            """
            import builtins, random, types
            json.dumps = lambda *args, **kwargs: "planted"
            sys.modules["chalk_planted"] = types.ModuleType("chalk_planted")
            sys.modules["random"].planted = True
            sys.path.insert(0, "/planted")
            os.environ["PLANTED"] = "1"
            builtins.planted = True
            sys.setrecursionlimit(50000)
            random.seed(0)
            facts["random"] = random.random()
            write()
            """,
        )
    )
    started = servers.started
    facts = assert_warm(
        run(
            settings,
            """
            import builtins, random
            facts["dumps"] = json.dumps({"a": 1})
            facts["module"] = "chalk_planted" in sys.modules
            facts["attribute"] = hasattr(random, "planted")
            facts["path"] = "/planted" in sys.path
            facts["env"] = "PLANTED" in os.environ
            facts["builtins"] = hasattr(builtins, "planted")
            facts["recursion"] = sys.getrecursionlimit()
            facts["random"] = random.random()
            write()
            """,
        )
    )
    assert facts["dumps"] == '{"a": 1}'
    assert facts["module"] == facts["attribute"] == facts["path"] == "False"
    assert facts["env"] == facts["builtins"] == "False"
    assert facts["recursion"] == "1000"
    assert facts["random"] != "0.8444218515250481"  # not the planted seed's first number
    assert servers.started == started


def test_random_numbers_differ_from_run_to_run(settings):
    draws = {
        assert_warm(run(settings, "import random; facts['n'] = random.getrandbits(64); write()"))[
            "n"
        ]
        for _ in range(3)
    }
    assert len(draws) == 3


def test_filling_the_disk_does_not_reach_the_next_run(settings):
    facts = assert_warm(
        run(
            settings,
            """
            written = 0
            chunk = b"x" * (1 << 20)
            fill = os.path.join(os.environ["HOME"], "fill")
            try:
                with open(fill, "wb") as out:
                    while True:
                        out.write(chunk)
                        out.flush()
                        written += len(chunk)
            except OSError as exc:
                facts["home"] = f"{type(exc).__name__} after {written >> 20} MiB"
            open(os.path.join(os.environ["HOME"], "left"), "w").write("for the next run")
            os.truncate(fill, 0)  # room for the output file, in the same scratch space
            for folder in ("/tmp", "/dev/shm", "/"):
                try:
                    open(os.path.join(folder, "fill"), "wb").close()
                    facts[folder] = "written"
                except OSError as exc:
                    facts[folder] = type(exc).__name__
            write()
            """,
            file_size_mb=8,
        )
    )
    assert re.fullmatch(r"OSError after [78] MiB", facts["home"]), facts  # the scratch: 8 MiB
    # /tmp is the run's own (a tmpfs as large as the scratch), the rest of the root is not.
    assert facts["/tmp"] == "written"
    assert facts["/dev/shm"] == facts["/"] == "PermissionError"
    after = assert_warm(
        run(
            settings,
            """
            home = os.environ["HOME"]
            stats = os.statvfs(home)
            facts["free"] = stats.f_bavail * stats.f_frsize >> 20
            facts["home"] = os.listdir(home)
            facts["tmp"] = os.listdir("/tmp")
            write()
            """,
            file_size_mb=8,
        )
    )
    assert int(after["free"]) >= 7 and after["home"] == "[]"
    assert "fill" not in after["tmp"]  # nothing of the last run's /tmp (the job's paths, yes)


def test_a_run_holds_none_of_the_servers_descriptors(settings):
    facts = assert_warm(
        run(
            settings,
            """
            def is_open(fd):
                try:
                    os.fstat(fd)
                except OSError:
                    return False
                return True
            facts["listed"] = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
            facts["open"] = [fd for fd in range(3, 1024) if is_open(fd)]
            try:
                facts["server fds"] = os.listdir(f"/proc/{os.getppid()}/fd")
            except OSError as exc:
                facts["server fds"] = type(exc).__name__
            write()
            """,
        )
    )
    assert facts["listed"] == "[0, 1, 2, 3]"  # 3: the folder listing itself
    assert facts["open"] == "[]"
    assert facts["server fds"] in ("FileNotFoundError", "PermissionError")


@pytest.mark.parametrize("keyring", [-4, -5], ids=["user", "user session"])
@pytest.mark.parametrize("how", ["warm", "cold", "direct"])
def test_the_slot_users_keyring_is_empty_for_every_run(settings, how, keyring, monkeypatch):
    # A uid's user and user-session keyrings outlive its processes: each run must find
    # them empty.
    settings = settings.model_copy(update={"warm_python": how == "warm"})
    if how == "direct":  # no fork server: each script starts its own bubblewrap
        from chalk_worker.sandbox import servers as module

        monkeypatch.setattr(module, "SERVER_SCRIPT", Path("/nonexistent/forkserver.py"))
        settings = settings.model_copy(update={"sandbox_uid_base": settings.sandbox_uid_base + 1})
    add_key = """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        long = ctypes.c_long
        facts["key"] = libc.syscall(
            long(248), b"user", b"chalk-planted", b"from-run-1", long(10), long(KEYRING)
        )
        write()
    """.replace("KEYRING", str(keyring))
    assert int(run(settings, add_key).scoring.metadata["key"]) > 0
    found = run(
        settings,
        """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        long = ctypes.c_long
        search = (long(250), long(10), long(KEYRING), b"user", b"chalk-planted", long(0))
        facts["found"] = libc.syscall(*search)
        write()
        """.replace("KEYRING", str(keyring)),
    )
    assert found.scoring.metadata["found"] == "-1"
    started = "warm" if how == "warm" else "cold"
    assert STARTED_MARKER + started in found.scoring.metadata["stderr"]


def server_processes() -> list[psutil.Process]:
    """This process's fork servers: the interpreters bubblewrap runs for it.

    Not bubblewrap itself (its command line names the server too), and not a
    warm run (a fork of a server, with the server's command line): their
    parent is bubblewrap.
    """
    found = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            words, parent = child.cmdline(), child.parent()
            if (
                words
                and words[0] != "bwrap"
                and words[-2].endswith("forkserver.py")
                and parent is not None
                and parent.name() == "bwrap"
            ):
                found.append(child)
    return found


def kill_servers() -> None:
    """SIGKILL every fork server of this process."""
    for process in server_processes():
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
            process.wait(10)


@contextlib.contextmanager
def killing_servers_after(seconds: float) -> Iterator[None]:
    """Kill every fork server of this process ``seconds`` into the block."""
    timer = threading.Timer(seconds, kill_servers)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()


def test_a_server_that_dies_mid_run_is_replaced_and_the_run_retried(settings, caplog):
    servers = pool(settings)
    assert_warm(run(settings, "write()"))
    started, direct = servers.started, starts("direct")
    with caplog.at_level(logging.WARNING), killing_servers_after(1.0):
        result = run(settings, "import time; time.sleep(3); write()")
    assert result.score == 1.0, result.scoring
    assert STARTED_MARKER + "cold" in result.scoring.metadata["stderr"]  # retried on its own
    assert starts("direct") == direct + 1
    assert "a fork server failed during a run" in caplog.text
    assert_warm(run(settings, "write()"))  # a new server
    assert servers.started == started + 1


def test_a_server_that_died_idle_is_replaced(settings):
    servers = pool(settings)
    assert_warm(run(settings, "write()"))
    started = servers.started
    assert server_processes()
    kill_servers()
    assert_warm(run(settings, "write()"))
    assert servers.started == started + 1


def test_servers_that_cannot_start_leave_runs_to_sandboxes_of_their_own(
    settings, monkeypatch, caplog
):
    from chalk_worker.sandbox import servers as module

    monkeypatch.setattr(module, "SERVER_SCRIPT", Path("/nonexistent/forkserver.py"))
    fresh = settings.model_copy(update={"sandbox_uid_base": settings.sandbox_uid_base + 1})
    direct = starts("direct")
    with caplog.at_level(logging.WARNING):
        for _ in range(module.STARTS_BEFORE_GIVING_UP + 1):
            result = run(fresh, "write()")
            assert result.score == 1.0
            assert STARTED_MARKER + "cold" in result.scoring.metadata["stderr"]
    assert starts("direct") == direct + module.STARTS_BEFORE_GIVING_UP + 1
    assert "fork servers are off in this process" in caplog.text
    assert pool(fresh).disabled_because


def test_a_timed_out_warm_run_is_killed_with_everything_it_started(settings):
    marker = f"302.{os.getpid()}{time.monotonic_ns() % 10**9}"
    code = PRELUDE + f"import subprocess, time\nsubprocess.Popen(['setsid', 'sleep', '{marker}'])\n"
    code += "time.sleep(60)\n"
    job = ScoringJob(judge=ExecutableJudge(["{python}", "-c", code, "out.json"], timeout_s=1))
    started = time.monotonic()
    result = score_job(job, settings=settings)
    assert time.monotonic() - started < 15
    assert result.scoring is not None and "timed out" in result.scoring.metadata["error"]
    assert STARTED_MARKER + "warm" in result.scoring.metadata["stderr"]
    assert not survivors(marker)
    assert_warm(run(settings, "write()"))


def test_signals_and_exit_statuses_are_reported_exactly(settings):
    killed = score_job(
        ScoringJob(
            judge=ExecutableJudge(
                ["{python}", "-c", PRELUDE + "import signal\nos.kill(os.getpid(), 15)", "o.json"]
            )
        ),
        settings=settings,
    )
    assert killed.scoring is not None
    # A fork server knows a signal from an exit status: no "also what ... reports" hedge.
    assert killed.scoring.metadata["error"] == "the script was killed by signal 15 (SIGTERM)"
    exited = score_job(
        ScoringJob(judge=ExecutableJudge(["{python}", "-c", "raise SystemExit(143)", "o.json"])),
        settings=settings,
    )
    assert exited.scoring is not None
    assert exited.scoring.metadata["error"] == "the script exited with status 143"


def test_health_says_whether_python_starts_warm():
    from chalk_worker.sandbox.cgroup_support import CgroupSupport
    from chalk_worker.sandbox.probe import SandboxLayers
    from chalk_worker.sandbox.warm import warm_python_report

    assert warm_python_report(ChalkSettings(), LAYERS).startswith("warm python: on (")
    off = warm_python_report(ChalkSettings(warm_python=False), LAYERS)
    assert off.startswith("warm python: OFF - CHALK_WARM_PYTHON=false")
    bare = SandboxLayers(
        root=False, bwrap=None, setpriv=None, cgroups=CgroupSupport(None, None, None)
    )
    assert "need root and bubblewrap" in warm_python_report(ChalkSettings(), bare)


def test_a_server_started_before_a_preloaded_file_changed_is_replaced(settings, tmp_path):
    import dataclasses

    from chalk_worker.sandbox.servers import ForkServerPool

    cold = get_sandbox(settings).cold_servers()
    assert cold is not None
    package = tmp_path / "task_package.py"
    package.write_text("VERSION = 1\n")
    pool = ForkServerPool(dataclasses.replace(cold.config, watched=(str(package),)), max_idle=1)
    try:
        with pool.server() as server:
            first = server
        with pool.server() as server:
            assert server is first and pool.started == 1  # unchanged: reused
        package.write_text("VERSION = 2 # edited\n")
        with pool.server() as server:
            assert server is not first and pool.started == 2
        assert not first.alive
    finally:
        pool.close()


TRACE_PARENT = r"""
#include <errno.h>
#include <stdio.h>
#include <sys/ptrace.h>
#include <time.h>
#include <unistd.h>
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}
int main(int argc, char **argv) {
    /* From the first instruction: trace the process that started this one, until it
       is gone (the parent becomes the server) or 2 s pass. */
    pid_t parent = getppid();
    int attached = 0, error = 0;
    double started = now();
    while (now() - started < 2000 && getppid() == parent) {
        if (ptrace(PTRACE_SEIZE, parent, 0, 0) == 0) { attached = 1; break; }
        error = errno;
    }
    FILE *out = fopen(argv[argc - 1], "w");
    fprintf(out, "{\"score\": 1, \"metadata\": {\"attached\": %d, \"errno\": %d}}",
            attached, error);
    fclose(out);
    return 0;
}
"""


def test_a_cold_command_cannot_trace_the_process_that_started_it(settings, tmp_path):
    # The spare that starts a cold command ends just after, as the slot's user: from
    # the command's first instruction it must be out of reach (it was dumpable once).
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("needs a C compiler: a Python script starts too late to race its parent")
    source = tmp_path / "trace_parent.c"
    source.write_text(TRACE_PARENT)
    program = tmp_path / "trace_parent"
    subprocess.run([compiler, "-O1", "-o", str(program), str(source)], check=True)
    program.chmod(0o755)
    tmp_path.chmod(0o755)
    cold = settings.model_copy(update={"warm_python": False})
    for _ in range(10):
        result = score_job(
            ScoringJob(judge=ExecutableJudge([str(program), "out.json"])), settings=cold
        )
        assert result.status is JobStatus.SUCCEEDED and result.score == 1.0, result
        assert result.scoring is not None and result.scoring.metadata["attached"] == "0", result
