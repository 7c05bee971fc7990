"""A fork server's spare: the process of the next run, made ahead of it.

The server (``forkserver``) forks a spare between runs; the spare takes new
mount and IPC namespaces, lends the server its mount namespace, builds most of
a fresh root there (``runroot``), and waits for its request on a socket the
worker holds. When the request comes it becomes the program: it joins the
slot's cgroups, finishes its root, takes its descriptors, limits, user and
group, and executes the command (cold) or replays an interpreter's ``main``
in itself (warm, ``pymain``). What it says of the start goes to the server on
a pipe: ``spawned: PID``, ``cold: why``, ``exec: errno``, ``setup: what``.

Standard library only, loaded by path by the server (never imported, never in
``sys.modules``): ``syscalls``, ``runroot`` and ``wire`` are given to it, and
``pycommand`` and ``pymain`` once the server is warm.
"""

import array
import contextlib
import errno
import gc
import json
import os
import resource
import signal
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from chalk_worker.sandbox import pycommand, pymain, runroot, syscalls, wire

UNUSED = b"unused"
"""What a spare says when its socket closed without a run."""


def _spawn(argv: list[str], env: dict[str, str]) -> tuple[int, int]:
    """Start ``argv`` with ``env``: ``(pid, 0)``, or ``(0, errno)`` if it cannot be executed.

    ``env``'s ``PATH`` is searched as the C library's ``execvp`` does, with
    ``/bin/sh`` for a file without ``#!``. ``posix_spawn`` (a ``vfork``): the
    child does not copy this process's memory, so neither it nor an ``exec``
    has a copy to tear down before the command starts.
    """
    program = argv[0]
    if "/" in program:
        candidates = [program]
    else:
        folders = env.get("PATH", "/bin:/usr/bin").split(":")
        candidates = [os.path.join(folder or ".", program) for folder in folders]
    defaults = (signal.SIGPIPE, signal.SIGXFSZ)  # as subprocess's restore_signals
    error = errno.ENOENT
    denied = False
    for candidate in candidates:
        try:
            return os.posix_spawn(candidate, argv, env, setsigdef=defaults), 0
        except OSError as exc:
            if exc.errno == errno.ENOEXEC:
                shell = ["/bin/sh", candidate, *argv[1:]]
                try:
                    return os.posix_spawn("/bin/sh", shell, env, setsigdef=defaults), 0
                except OSError:
                    return 0, errno.ENOEXEC
            if exc.errno == errno.EACCES:
                denied = True
            elif exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ESTALE, errno.ENODEV):
                return 0, exc.errno or errno.ENOENT
            error = exc.errno or errno.ENOENT
    return 0, errno.EACCES if denied else error


class Spare:
    """A process forked for the next run ahead of it, its namespaces and root mostly made.

    It waits for the request on the other end of ``hand`` (the worker's, once
    handed over); what it says of the run's start comes back on ``started``.
    """

    def __init__(self, pid: int, hand: socket.socket, started: int) -> None:
        self.pid = pid
        self.hand = hand
        self.started = started


def make_spare(
    server: socket.socket,
    plan: list["runroot.Step"],
    warm: "pymain.Interpreter | None",
    drop: Sequence[int] = (),
) -> Spare:
    """Fork the process of the next run (done between runs: off their path).

    ``drop``: the last run's mount namespace, which the spare lets go of once it
    has lent its own (its mounts come down there, not on the way out of the
    run's last process, nor before the worker has the spare's socket). The spare
    sets up at the server's priority: the worker may send it a run at once, and
    the run's clock is running.
    """
    hand, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    started_r, started_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        server.close()  # this process's copy: the worker's socket is not the run's business
        hand.close()
        os.close(started_r)
        _wait_as_spare(theirs, started_w, plan, warm, drop)
    for fd in drop:
        os.close(fd)
    theirs.close()
    os.close(started_w)
    return Spare(pid, hand, started_r)


def _wait_as_spare(
    hand: socket.socket,
    started: int,
    plan: list["runroot.Step"],
    warm: "pymain.Interpreter | None",
    drop: Sequence[int],
) -> NoReturn:
    """A spare: make its namespaces and root, wait for its request, become the run."""
    gc.disable()  # nothing to collect before exec (a warm run turns it back on)
    problem = ""
    try:
        syscalls.unshare(syscalls.CLONE_NEWNS | syscalls.CLONE_NEWIPC)
    except BaseException as exc:
        problem = f"setup: {type(exc).__name__}: {exc}"
    _lend_namespace(hand, ok=not problem)
    for fd in drop:  # the last run's namespace: its mounts come down now
        os.close(fd)
    try:
        if not problem:
            os.umask(0o022)
            runroot.build_root(plan)
    except BaseException as exc:
        problem = f"setup: {type(exc).__name__}: {exc}"
    if not problem:
        _prefault_request_path()
    try:
        data, fds = wire.receive(hand)
    except BaseException:
        data, fds = b"", []
    hand.close()
    if not data:
        os.write(started, UNUSED)  # the worker closed this spare's socket, or is gone
        os._exit(0)
    if data != b"run" or not fds:
        problem = "setup: malformed request"
    if problem:
        os.write(started, problem.encode())
        os._exit(127)
    _become_program(fds, started, plan, warm)


def _lend_namespace(hand: socket.socket, ok: bool) -> None:
    """Give the server the spare's new mount namespace, to hold past the run's end.

    The last process of a mount namespace takes its mounts down on its way out
    (the run's root, ``/proc``, a ``/tmp`` tmpfs, then an RCU grace period):
    ~0.3 ms between a command's exit and its parent hearing of it. Held by the
    server, the namespace outlives the run; the next spare lets it go once it
    has lent its own, before it builds its root (``_make_spare``). Sent before
    anything of a job is known; nothing from a job ever reaches ``hand``.
    """
    fds = []
    with contextlib.suppress(OSError):  # without it the namespace goes with the run
        if ok:
            fds = [os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)]
    try:
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        hand.sendmsg([b"ns"], ancillary)
    except OSError:
        pass  # the server is gone: no request will come either
    finally:
        for fd in fds:
            os.close(fd)


_REQUEST_SHAPE = (
    '{"argv": ["/usr/bin/python3", "-c", "pass", "/tmp/j/s/output/out.json"], '
    '"env": [["PATH", "/usr/bin:/bin"], ["HOME", "/tmp/j/s/home"]], "cwd": "/tmp/j/s/home", '
    '"umask": 18, "uid": 1, "gid": 1, "rlimits": [[4, 0, 0]], "tmp_bytes": 1048576, '
    '"mounts": ["/tmp/j/submission", "/tmp/j/s"], "cgroups": 1, "python": null}'
)
"""A request like the worker's, parsed by each spare before its own comes (see below)."""


def _prefault_request_path() -> None:
    """Run, with no effect, the library code a request runs first, before it comes.

    A spare is a fork of the server: its first write to a page they share copies
    the page, a fault of ~4 µs here (each goes through the hypervisor). Python
    writes to every object it uses (reference counts), so code run for the first
    time after the request would take those faults on the run's path: this takes
    about half of them (~60, the JSON parser and the path functions) while idle.
    """
    json.loads(_REQUEST_SHAPE)
    with contextlib.suppress(OSError):  # only a head start: the run does not depend on it
        runroot.prefault_finish_root()


def _become_program(
    fds: list[int], started: int, plan: list["runroot.Step"], warm: "pymain.Interpreter | None"
) -> NoReturn:
    """The run's process: the job's set-up, then the command (exec or warm). Never returns."""
    try:
        request: wire.RunRequest = json.loads(os.pread(fds[0], os.fstat(fds[0]).st_size, 0))
        count = request["cgroups"]
        stdout, stderr = fds[1], fds[2]
        first = 4 if request.get("stdin") else 3  # the cgroup files follow stdin, if sent
        for fd in fds[first : first + count]:
            os.write(fd, b"0")  # 0: the writer itself; its children follow
        syscalls.unshare(syscalls.CLONE_NEWCGROUP)  # its root: the slot's groups
        runroot.finish_root(plan, request, fds[first + count :])
        stdin = fds[3] if first == 4 else os.open("/dev/null", os.O_RDONLY)
        os.dup2(stdin, 0)
        os.dup2(stdout, 1)
        os.dup2(stderr, 2)
        # Nothing root opened stays open once used (cgroup.procs files, mounts, the request).
        for fd in {stdin, *fds} - {0, 1, 2}:
            os.close(fd)
        os.umask(request["umask"])
        os.chdir(request["cwd"])
        for number, soft, hard in request["rlimits"]:
            resource.setrlimit(number, (soft, hard))
        uid, gid = request["uid"], request["gid"]
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        # Every capability goes with root, and the process is not dumpable now: the
        # slot's user cannot trace it (a cold run's command gets its own at exec).
        os.setresuid(uid, uid, uid)
        syscalls.clear_user_keyring()
        argv = request["argv"]
        if request["python"] is not None and warm is not None:
            command = pycommand.PythonCommand.from_json(request["python"])
            refusal = _warm_refusal(command, warm, dict(request["env"]))
            if refusal:
                os.write(started, f"cold: {refusal}".encode())
                os._exit(0)
            os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[1] + 1)
            syscalls.prctl(syscalls.PR_SET_DUMPABLE, 1)  # as after exec: it may read its /proc
            gc.enable()
            warm.run_main(argv, command, [(str(k), str(v)) for k, v in request["env"]])
        syscalls.cloexec_from(3)
        spawned, error = _spawn(argv, dict(request["env"]))
    except BaseException as exc:  # nothing of the job ran yet
        os.write(started, f"setup: {type(exc).__name__}: {exc}".encode())
        os._exit(127)
    if not spawned:
        os.write(started, f"exec: {error}".encode())
        os._exit(0)
    _step_aside(spawned, started)


def _step_aside(program: int, started: int) -> NoReturn:
    """End this process, once it started ``program``, on another core than the program's.

    This process is a copy of the server's memory: tearing it down costs about a
    millisecond of CPU, which, done here, the kernel gives it ahead of the
    program it has just woken from its ``exec`` on the same core. On another
    core it is done while the program starts. It is not dumpable (since it took
    the slot's uid): the program cannot trace it meanwhile.
    """
    os.write(started, f"spawned: {program}".encode())  # the command goes to the subreaper
    with contextlib.suppress(OSError):
        others = os.sched_getaffinity(0) - {syscalls.current_cpu()}
        if others:
            os.sched_setaffinity(0, others)
    os._exit(0)


def _warm_refusal(
    command: "pycommand.PythonCommand", warm: "pymain.Interpreter", env: dict[str, str]
) -> str:
    """Why this command must run cold ("" when it can run warm); checked as the slot's user."""
    if env.get("PYTHONPATH") != os.environ.get("PYTHONPATH"):
        return "its PYTHONPATH is not the one this server's Python started with"
    if command.kind == "script":
        source = pycommand.read_script(command.target)
        if isinstance(source, str):
            return source
    folder = pycommand.first_path_entry(command)
    shadow = pycommand.shadowed_module(folder, warm.preloaded)
    if shadow is not None:
        return f"{os.path.join(folder, shadow)} would be imported instead of a preloaded module"
    return ""
