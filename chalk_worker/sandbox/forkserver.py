"""The fork server: a pre-started interpreter, inside the sandbox, that starts every run.

The worker starts it under bubblewrap (own PID, network, IPC, UTS and mount
namespaces; only the allowlisted paths), as root with just the capabilities it
needs (``CAP_SYS_ADMIN``, ``CAP_SETUID``, ``CAP_SETGID``, ``CAP_SYS_CHROOT``,
``CAP_KILL``, ``CAP_SYS_RESOURCE``; ``_harden``), not dumpable, with
``no_new_privs``. It imports the modules scripts commonly use, then serves one
run at a time and never runs job code itself:

- ahead of each run, the server forks a **spare** process, which takes new mount
  and IPC namespaces and builds most of a fresh root there (the server's view,
  a ``/proc`` that lists only the run's own processes, a private ``/tmp``:
  ``runroot``), and hands the worker the spare's end of a socket: the worker
  sends the run there itself, so that the server need not wake to pass it on;
- when a run comes, the spare gets the request and becomes the **program**: it
  joins the slot's cgroups, takes a cgroup namespace, adds the job's submission,
  scratch and named paths (handed over as detached mounts) to its root, chroots
  into it, and becomes the command: stdin ``/dev/null`` (or a file the worker
  opened), stdout
  and stderr on the worker's pipes, working folder, umask, rlimits, the slot's
  uid and gid with no groups and no capabilities, the user keyring emptied;
  then ``execvp`` (a cold run) or, for ``{python}`` commands, the cold
  interpreter's ``main`` replayed in this already-started one (a warm run,
  ``pymain``, for the commands ``pycommand`` finds fit).
- the server is the subreaper of everything the program starts. When the
  program ends, it kills whatever is left in its PID namespace (only the run's
  processes live there besides bubblewrap's init and the server), reaps it,
  and reports the program's status. It holds the run's mount namespace until
  the next spare lets it go: the run's mounts do not come down on the way out
  of its last process, between its exit and the report.

A run cannot reach the server: the server is root (no signals, no ptrace, no
``/proc/<pid>/mem``) and not even listed in the run's ``/proc``. Each run is a
new fork, so nothing one run changes in memory is seen by the next; the server
keeps no job data (a request goes straight to the run's process, in a memory
file the server never reads).

Protocol on the ``SOCK_SEQPACKET`` socket (the worker is the only peer):

1. worker: the configuration (JSON: the run view, modules to import);
   server: ``{"ready": true, "warm": ..., "note": ...}``, then ``{"spare": true}``
   with the next spare's socket.
2. per run, worker, on that spare's socket (then closed): ``run`` with
   descriptors: the request (a memory file), the stdout and stderr pipes, the
   stdin file when the request says so, each cgroup's ``cgroup.procs``, each
   detached mount; server, once the program has
   ended: ``{"start": ..., "end": ...}``, how it started (``""`` when the
   program ran, ``cold: why``, ``exec: errno``, ``setup: what failed``) and its
   wait status as text; then ``{"spare": true}`` with the next spare's socket.

A spare whose socket closes without a run (the worker stops the server, or is
gone) says so (``unused``), and the server ends.

Standard library only, started as a script: ``python forkserver.py FD``. The
modules of this folder it uses (``syscalls``, ``runroot``, ``pycommand``,
``pymain``) are loaded by path with ``_sibling``, never imported: scripts must
not find the server's code in ``sys.modules``.
"""

import sys

_STARTUP_MODULES = frozenset(sys.modules)
_STARTUP_PATH = list(sys.path)

import array  # noqa: E402 - after recording what a bare interpreter has
import contextlib  # noqa: E402
import errno  # noqa: E402
import gc  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from typing import TYPE_CHECKING, Any, NoReturn  # noqa: E402

MAX_FDS = 64
"""Descriptors one run request may carry."""
UNUSED = b"unused"
"""What a spare says when its socket closed without a run."""


def _sibling(name: str, **given: Any) -> Any:
    """A module of this folder, loaded by path and not registered in ``sys.modules``.

    Scripts must not see, or import, the server's own code. ``given``: the
    siblings it uses, loaded this way already, set in it before its code runs
    (it cannot import them).
    """
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_chalk_fork_server_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    vars(module).update(given)
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:
    from chalk_worker.sandbox import pycommand, pymain, runroot, syscalls
elif __name__ == "__main__":
    # pycommand and pymain too, once the configuration asks for warm runs
    syscalls = _sibling("syscalls")
    runroot = _sibling("runroot", syscalls=syscalls)


def _send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    if fds:
        sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sock.send(data)


def _receive(sock: socket.socket) -> tuple[bytes, list[int]]:
    fds = array.array("i")
    data, ancillary, _, _ = sock.recvmsg(1 << 20, socket.CMSG_SPACE(MAX_FDS * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    return data, list(fds)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def _preload(names: list[str]) -> str:
    """Import the modules runs are likely to need; a note on what could not be."""
    failed = []
    for name in names:
        try:
            __import__(name)
        except Exception as exc:  # a broken task package must not stop the server
            failed.append(f"{name} ({type(exc).__name__})")
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:
        return "a preloaded module started a thread: forking would not be safe"
    return "could not import " + ", ".join(failed) if failed else ""


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


class _Spare:
    """A process forked for the next run ahead of it, its namespaces and root mostly made.

    It waits for the request on the other end of ``hand`` (the worker's, once
    handed over); what it says of the run's start comes back on ``started``.
    """

    def __init__(self, pid: int, hand: socket.socket, started: int) -> None:
        self.pid = pid
        self.hand = hand
        self.started = started


def _make_spare(
    server: socket.socket,
    plan: list["runroot.Step"],
    warm: "pymain.Interpreter | None",
    drop: Sequence[int] = (),
) -> _Spare:
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
    return _Spare(pid, hand, started_r)


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
        data, fds = _receive(hand)
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
        request = json.loads(os.pread(fds[0], os.fstat(fds[0]).st_size, 0))
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
        argv: list[str] = request["argv"]
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


_reaped: dict[int, int] = {}
"""Wait statuses of children reaped while the server waited for another one."""


def _reap_until(program: int) -> int:
    """Reap children (the run's orphans come to this subreaper) until ``program`` ends."""
    while program not in _reaped:
        pid, status = os.waitpid(-1, 0)
        _reaped[pid] = status
    return _reaped.pop(program)


def _kill_leftovers() -> None:
    """Kill and reap every process the run left: all of this PID namespace but init and us."""
    with contextlib.suppress(ProcessLookupError):  # nothing was left
        os.kill(-1, signal.SIGKILL)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            _reaped.clear()
            return


def _offer(sock: socket.socket, spare: _Spare) -> list[int]:
    """Hand the worker ``spare``'s socket (it sends the next run there itself); the
    spare's mount namespace (``_lend_namespace``), to hold past the run."""
    namespace: list[int] = []
    try:
        with contextlib.suppress(OSError):  # none from a spare that failed: its run says why
            namespace = _receive(spare.hand)[1]
        _send(sock, {"spare": True}, [spare.hand.fileno()])
    except BaseException:
        for fd in namespace:
            os.close(fd)
        raise
    finally:
        spare.hand.close()  # the spare sees its socket close once the worker's copy closes
    return namespace


def _follow_run(spare: _Spare) -> dict[str, str] | None:
    """The report of the run ``spare`` became, once it has ended and nothing of it is
    left; ``None`` when its socket closed without a run (``spare`` is used up either way)."""
    start, status = "setup: the run's start was not reported", 0
    try:
        said = os.read(spare.started, 65536)
        if said == UNUSED:
            _reap_until(spare.pid)
            return None
        program = said.removeprefix(b"spawned: ")
        if program != said and program.isdigit():  # a cold run: wait for the command
            status = _reap_until(int(program))
            start = ""
        else:
            status = _reap_until(spare.pid)
            start = (said + _read_all(spare.started)).decode(errors="replace")
    finally:
        with contextlib.suppress(OSError):  # closed already by _read_all
            os.close(spare.started)
        _kill_leftovers()  # whatever happened, nothing of the run outlives its report
    return {"start": start, "end": str(status)}


def _harden() -> None:
    """Keep only the capabilities runs need; not dumpable; the run's orphans come here."""
    syscalls.keep_capabilities(
        (
            syscalls.CAP_KILL,
            syscalls.CAP_SETGID,
            syscalls.CAP_SETUID,
            syscalls.CAP_SYS_CHROOT,
            syscalls.CAP_SYS_ADMIN,
            syscalls.CAP_SYS_RESOURCE,
        )
    )
    syscalls.prctl(syscalls.PR_SET_NO_NEW_PRIVS, 1)
    syscalls.prctl(syscalls.PR_SET_DUMPABLE, 0)
    syscalls.prctl(syscalls.PR_SET_CHILD_SUBREAPER, 1)


def serve(fd: int) -> None:
    """Serve runs on the socket ``fd`` until the worker closes it."""
    sock = socket.socket(fileno=fd)
    config = json.loads(sock.recv(1 << 20))
    _harden()
    plan = runroot.plan_root(config["view"])
    note = _preload(config["preload"]) if config["warm"] else ""
    if config["warm"]:
        global pycommand, pymain
        pycommand = _sibling("pycommand")
        pymain = _sibling("pymain", pycommand=pycommand)
    warm = pymain.Interpreter(_STARTUP_MODULES, _STARTUP_PATH) if config["warm"] else None
    if note.startswith("a preloaded module started a thread"):
        warm = None
    if warm is not None and warm.recursion.address is None:
        note = "this Python's recursion counter was not found: runs would recurse less deep"
        warm = None
    for stream in (sys.stdout, sys.stderr):
        stream.flush()  # a fork must not inherit anything buffered
    gc.collect()
    gc.freeze()  # forks then copy fewer pages: the collector does not touch old objects
    spare = _make_spare(sock, plan, warm)
    _send(sock, {"ready": True, "warm": warm is not None, "note": note})
    while True:
        try:
            namespace = _offer(sock, spare)
            report = _follow_run(spare)
            if report is None:
                return  # the worker closed the spare's socket: it stops this server, or is gone
            _send(sock, report)
            spare = _make_spare(sock, plan, warm, namespace)  # while the worker reads the report
        except OSError:  # the worker's socket is closed, or no process can be made
            return


if __name__ == "__main__":
    serve(int(sys.argv[1]))
