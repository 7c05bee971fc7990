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

import contextlib  # noqa: E402
import gc  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import types  # noqa: E402
from typing import TYPE_CHECKING  # noqa: E402


def _sibling(name: str, **given: object) -> types.ModuleType:
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
    from chalk_worker.sandbox import runroot, syscalls
elif __name__ == "__main__":
    # pycommand and pymain too, in serve(), once the configuration asks for warm runs
    syscalls = _sibling("syscalls")
    runroot = _sibling("runroot", syscalls=syscalls)


if TYPE_CHECKING:
    from chalk_worker.sandbox import spare as spares
    from chalk_worker.sandbox import wire
elif __name__ == "__main__":
    wire = _sibling("wire")
    spares = _sibling("spare", syscalls=syscalls, runroot=runroot, wire=wire)


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


def _offer(sock: socket.socket, spare: "spares.Spare") -> list[int]:
    """Hand the worker ``spare``'s socket (it sends the next run there itself); the
    spare's mount namespace (``_lend_namespace``), to hold past the run."""
    namespace: list[int] = []
    try:
        with contextlib.suppress(OSError):  # none from a spare that failed: its run says why
            namespace = wire.receive(spare.hand)[1]
        wire.send(sock, {"spare": True}, [spare.hand.fileno()])
    except BaseException:
        for fd in namespace:
            os.close(fd)
        raise
    finally:
        spare.hand.close()  # the spare sees its socket close once the worker's copy closes
    return namespace


def _follow_run(spare: "spares.Spare") -> dict[str, str] | None:
    """The report of the run ``spare`` became, once it has ended and nothing of it is
    left; ``None`` when its socket closed without a run (``spare`` is used up either way)."""
    start, status = "setup: the run's start was not reported", 0
    try:
        said = os.read(spare.started, 65536)
        if said == spares.UNUSED:
            _reap_until(spare.pid)
            return None
        program = said.removeprefix(b"spawned: ")
        if program != said and program.isdigit():  # a cold run: wait for the command
            status = _reap_until(int(program))
            start = ""
        else:
            status = _reap_until(spare.pid)
            start = (said + wire.read_all(spare.started)).decode(errors="replace")
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
    config: wire.ServerSetup = json.loads(sock.recv(1 << 20))
    _harden()
    plan = runroot.plan_root(wire.parse_view(config["view"]))
    note = _preload(config["preload"]) if config["warm"] else ""
    warm = None
    if config["warm"]:
        pycommand = _sibling("pycommand")
        pymain = _sibling("pymain", pycommand=pycommand)
        vars(spares).update(pycommand=pycommand, pymain=pymain)  # a warm spare runs with them
        warm = pymain.Interpreter(_STARTUP_MODULES, _STARTUP_PATH)
    if note.startswith("a preloaded module started a thread"):
        warm = None
    if warm is not None and warm.recursion.address is None:
        note = "this Python's recursion counter was not found: runs would recurse less deep"
        warm = None
    for stream in (sys.stdout, sys.stderr):
        stream.flush()  # a fork must not inherit anything buffered
    gc.collect()
    gc.freeze()  # forks then copy fewer pages: the collector does not touch old objects
    spare = spares.make_spare(sock, plan, warm)
    wire.send(sock, {"ready": True, "warm": warm is not None, "note": note})
    while True:
        try:
            namespace = _offer(sock, spare)
            report = _follow_run(spare)
            if report is None:
                return  # the worker closed the spare's socket: it stops this server, or is gone
            wire.send(sock, report)
            # made while the worker reads the report
            spare = spares.make_spare(sock, plan, warm, namespace)
        except OSError:  # the worker's socket is closed, or no process can be made
            return


if __name__ == "__main__":
    serve(int(sys.argv[1]))
