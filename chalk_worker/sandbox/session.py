"""The sandbox: run an untrusted command with every layer this machine provides.

A ``SandboxSession`` is one judge's stay in the sandbox: a claimed slot (its
own uid), a private scratch folder (a size-capped tmpfs where the worker is
root) with ``home/`` and ``output/``, and the slot's cgroups. ``run`` starts
the command in new PID, network, mount, IPC namespaces (only allowlisted paths
visible), as the slot user, with rlimits, an empty stdin, capped output and a
wall-clock timeout; when it ends, everything it started is killed. Leaving the
session removes the scratch and frees the slot.

Where the machine allows it (root, bubblewrap, Linux 5.12+), a run starts from
a fork server (``servers``, ``forkserver``) that already sits in a sandbox:
the command is executed from there, or, for ``{python}`` commands, the
interpreter is forked without a new one starting (warm Python). Otherwise, or
when a server dies, the run starts its own bubblewrap, as it always did
(``direct``).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from chalk_client.settings import ChalkSettings
from chalk_worker.sandbox import cleanup, stopping, syscalls
from chalk_worker.sandbox.bwrap import python_paths
from chalk_worker.sandbox.cgroups import SlotCgroups
from chalk_worker.sandbox.direct import kill_everything, run_direct
from chalk_worker.sandbox.probe import SandboxLayers, announce, detect_layers
from chalk_worker.sandbox.process import TOKEN_VARIABLE, ProcessLimits, ProcessOutcome
from chalk_worker.sandbox.pycommand import PythonCommand
from chalk_worker.sandbox.served import RunSpec, run_served
from chalk_worker.sandbox.server_pools import ServerPools
from chalk_worker.sandbox.servers import ForkServerLost, ForkServerPool
from chalk_worker.sandbox.slots import Slot, SlotPool
from chalk_worker.sandbox.workdirs import PREFIX, in_memory_area

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SlotUsage:
    """What the processes of a session's slot have used, as its cgroups count it."""

    cpu_s: float | None
    """CPU seconds so far, of every process the slot ever held (take differences)."""
    memory_bytes: int | None
    """Memory charged to the slot now: what its processes hold, and files it read or
    wrote that the kernel still caches (a compiler's libraries, say)."""
    memory_peak_bytes: int | None
    """The most memory charged to it at once since ``start_measuring``."""
    cpu_stall_s: float | None
    """Seconds its processes could have run but waited for a CPU, so far (take
    differences): a busy machine, not a slow program."""


class SandboxSession:
    """One judge's stay in the sandbox; made by ``Sandbox.session``."""

    def __init__(
        self, sandbox: Sandbox, scratch: Path, slot: Slot | None, work_root: Path | None = None
    ) -> None:
        self.sandbox = sandbox
        self.scratch = scratch
        self.slot = slot
        self.work_root = work_root or scratch.parent
        """The folder holding every job's folder (and so other runs' scratch spaces)."""
        self.home = scratch / "home"
        """The script's default working folder and ``HOME``."""
        self.output_dir = scratch / "output"
        """Where the script's output file goes."""

    def visible(self, path: Path, readonly: Sequence[Path] = ()) -> bool:
        """Whether ``path`` is inside the sandbox's view (always true without bubblewrap).

        Compared as text, as ``PurePath.parents`` would (no link resolved), but
        without building every parent of every path: this runs for each
        absolute path of each command.
        """
        if not self.sandbox.layers.bwrap:
            return True
        text = str(path)
        roots = ["/usr", "/etc", str(self.scratch), *self.sandbox.readonly_texts]
        roots += [str(root) for root in readonly]
        return any(_inside(text, root) for root in roots)

    def _hidden(self, readonly: Sequence[Path]) -> Path | None:
        """``work_root`` when a path shown to the run holds it: the run sees it empty.

        A read-only path is shown with the mounts inside it, which below the work
        root are other runs' scratch spaces (the mount points at least, and, for
        an instant after their run, the space itself). The run's own folders are
        then shown on top. Not done when an allowlisted path lies inside the work
        root (it would be hidden too).
        """
        if not self.sandbox.layers.bwrap:
            return None
        shown = ["/usr", "/etc", *self.sandbox.readonly_texts, *map(str, readonly)]
        # As named, or where a link leads (the run's root has the folder there).
        for root in dict.fromkeys([str(self.work_root), os.path.realpath(self.work_root)]):
            if not any(_inside(root, path) for path in shown):
                continue
            if any(_inside(path, root) and path != root for path in self.sandbox.readonly_texts):
                return None
            return Path(root)
        return None

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: dict[str, str],
        limits: ProcessLimits,
        readonly: Sequence[Path] = (),
        python: PythonCommand | None = None,
        stdin: Path | None = None,
        conceal: Sequence[Path] = (),
    ) -> ProcessOutcome:
        """Run ``argv`` contained and wait for it; kill all it left behind.

        ``python``: the command is ``{python}`` with this program, and may run
        warm (forked from a started interpreter) where the sandbox offers it.
        ``stdin``: a file the command reads as its stdin (the worker opens it:
        the run needs no view of it); else it reads nothing. ``conceal``:
        folders the sandbox shows every run (the ``tasks`` folder, say) that
        this one sees empty (except one holding the run's scratch space).
        """
        if not _startable(argv[0], cwd, env.get("PATH")):
            return _not_started(f"could not start {argv[0]!r}: not found or not executable")
        token = os.urandom(12).hex()
        env = {**env, TOKEN_VARIABLE: token}
        switch = stopping.CURRENT.get()
        if switch is None:
            return self._run(argv, cwd, env, limits, readonly, python, stdin, conceal)
        cgroups = self.sandbox.cgroups_for(self.slot) if self.slot is not None else None
        uid = self.slot.uid if self.slot is not None else None
        ticket = switch.enter(
            functools.partial(kill_everything, 0, cgroups, uid, None if uid else token)
        )
        if ticket is None:
            return _not_started("not started: its job was stopped (cancelled)")
        try:
            return self._run(argv, cwd, env, limits, readonly, python, stdin, conceal)
        finally:
            switch.leave(ticket)

    def _run(
        self,
        argv: Sequence[str],
        cwd: Path,
        env: dict[str, str],
        limits: ProcessLimits,
        readonly: Sequence[Path],
        python: PythonCommand | None,
        stdin: Path | None,
        conceal: Sequence[Path],
    ) -> ProcessOutcome:
        """``run`` once its job's stop switch (if any) has been entered."""
        if self.slot is not None:
            spec = RunSpec(
                argv=argv,
                cwd=cwd,
                env=env,
                limits=limits,
                slot=self.slot,
                cgroups=self.sandbox.cgroups_for(self.slot),
                mounts=[*((path, True) for path in readonly), (self.scratch, False)],
                hide=self._hidden(readonly),
                stdin=stdin,
                conceal=conceal,
            )
            try:
                outcome = self._run_served(spec, python)
            except ForkServerLost as exc:
                log.warning(
                    "a fork server failed during a run (%s); the run starts again in a sandbox "
                    "of its own",
                    exc,
                )
                kill_everything(0, spec.cgroups, self.slot.uid, None)
                self._clear_scratch()
            else:
                if outcome is not None:
                    kill_everything(0, spec.cgroups, self.slot.uid, None)
                    return outcome
        return run_direct(
            argv,
            cwd=cwd,
            env=env,
            limits=limits,
            layers=self.sandbox.layers,
            readonly=[*self.sandbox.readonly_roots, *readonly],
            scratch=self.scratch,
            slot=self.slot,
            cgroups=self.sandbox.cgroups_for(self.slot) if self.slot else None,
            hide=self._hidden(readonly),
            stdin=stdin,
            conceal=conceal,
        )

    def drop_cached(self) -> None:
        """Reclaim the files the slot's memory caches (between runs: a compile's, say), so
        that the runs after count their own memory only."""
        cgroups = self.sandbox.cgroups_for(self.slot) if self.slot is not None else None
        if cgroups is not None:
            cgroups.drop_cached()

    def start_measuring(self) -> None:
        """Start the peak memory of the slot's processes afresh (before a run)."""
        cgroups = self.sandbox.cgroups_for(self.slot) if self.slot is not None else None
        if cgroups is not None:
            cgroups.reset_memory_peak()

    def usage(self) -> SlotUsage:
        """The CPU seconds the slot's processes have used so far, the memory charged to
        it now and its peak since ``start_measuring``; ``None`` for what this machine
        cannot tell."""
        cgroups = self.sandbox.cgroups_for(self.slot) if self.slot is not None else None
        if cgroups is None:
            return SlotUsage(None, None, None, None)
        return SlotUsage(
            cgroups.cpu_usage_s(),
            cgroups.memory_bytes(),
            cgroups.memory_peak_bytes(),
            cgroups.cpu_stall_s(),
        )

    def _run_served(self, spec: RunSpec, python: PythonCommand | None) -> ProcessOutcome | None:
        """Run on this process's fork servers: warm if it can, else cold; ``None`` if none.

        A run that conceals folders runs warm only on a server that imported no task
        package: a warm interpreter holds in memory what it preloaded.
        """
        warm = None
        if python is not None:
            warm = self.sandbox.warm_servers(tasks=not spec.conceal)
        if warm is not None:
            with warm.server() as server:
                if server is not None:
                    outcome = run_served(server, spec, python)
                    if outcome is not None:
                        return outcome  # else the warm path refused it: a cold run
        cold = self.sandbox.cold_servers()
        if cold is None:
            return None
        with cold.server() as server:
            return run_served(server, spec, None) if server is not None else None

    def _clear_scratch(self) -> None:
        """Empty ``home/`` and ``output/`` for a fresh attempt."""
        for folder in (self.home, self.output_dir):
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            if self.slot is not None:
                os.chown(folder, self.slot.uid, self.slot.gid)


def _not_started(why: str) -> ProcessOutcome:
    """The outcome of a run that did not start, and why."""
    return ProcessOutcome(
        returncode=None, timed_out=False, stdout="", stderr="", duration_s=0.0, start_error=why
    )


def _inside(path: str, root: str) -> bool:
    """Whether the path ``path`` is ``root`` or below it (both as ``str(Path)`` writes them)."""
    return path == root or path.startswith(root if root.endswith("/") else root + "/")


def _startable(program: str, cwd: Path, path: str | None) -> bool:
    """Whether ``program`` names an executable file, as the command will look it up.

    A name with a slash is a path, relative to the command's ``cwd``; a bare name is
    looked up on ``path``.
    """
    if "/" not in program:
        return shutil.which(program, path=path) is not None
    candidate = cwd / program
    return candidate.is_file() and os.access(candidate, os.X_OK)


class Sandbox:
    """The sandbox of this worker process, set up from its settings and the machine's layers."""

    def __init__(self, settings: ChalkSettings, layers: SandboxLayers | None = None) -> None:
        self.settings = settings
        self.layers = layers or detect_layers(settings.sandbox_tune_cgroups)
        self.layers.require(settings.sandbox_require)
        announce(self.layers)
        self.readonly_roots = [*python_paths(), *(Path(p) for p in settings.sandbox_paths)]
        self.readonly_texts = [str(root) for root in self.readonly_roots]
        self.pool: SlotPool | None = None
        if "user" in self.layers.available:
            self.pool = SlotPool(
                Path(settings.sandbox_lock_dir), settings.sandbox_uid_base, settings.sandbox_slots
            )
        self._cgroups: dict[int, SlotCgroups] = {}
        self._lock = threading.Lock()
        self.can_mount = self.layers.root
        """Whether scratch spaces are mounted tmpfs (off after a mount fails)."""
        self.servers = ServerPools(
            self.layers, self.readonly_roots, settings, slots=self.pool is not None
        )
        atexit.register(self.close)

    def warm_servers(self, tasks: bool = True) -> ForkServerPool | None:
        """This process's warm fork servers (modules imported), or ``None`` where off.

        ``tasks``: servers that imported the task packages too; false: the standard
        modules only (for runs that must not reach the graders' code).
        """
        if not self.settings.warm_python:
            return None
        return self.servers.pool("warm" if tasks else "warm-standard")

    def cold_servers(self) -> ForkServerPool | None:
        """This process's fork servers for cold runs, or ``None`` where the machine has none."""
        return self.servers.pool("cold")

    def close(self) -> None:
        """Remove the slot cgroups this process used, where no process holds their slot now.

        Other Chalk processes on the machine share the slots: a slot another process
        holds is left alone (it makes its groups again when they are missing anyway).
        """
        self.servers.close()
        with self._lock:
            for number, cgroups in self._cgroups.items():
                if self.pool is None:
                    continue
                with self.pool.holding(number) as held:
                    if held is not None:
                        cgroups.remove()
            self._cgroups.clear()

    def cgroups_for(self, slot: Slot) -> SlotCgroups | None:
        """The slot's cgroups (this process's handle on them, kept between runs)."""
        support = self.layers.cgroups
        if not (support.kill or support.memory or support.pids):
            return None
        with self._lock:
            if slot.number not in self._cgroups:
                self._cgroups[slot.number] = SlotCgroups(support, slot.name)
            return self._cgroups[slot.number]

    @contextlib.contextmanager
    def session(
        self, parent: Path, scratch_bytes: int, work_root: Path | None = None
    ) -> Iterator[SandboxSession]:
        """A slot and a fresh scratch folder inside ``parent``, both released on exit.

        ``work_root``: the folder holding the folders of every job (``parent``'s
        own by default), which runs see empty but for their own part.
        """
        scratch = Path(tempfile.mkdtemp(prefix="judge-", dir=parent))
        with contextlib.ExitStack() as stack:
            slot = stack.enter_context(self.pool.claim()) if self.pool else None
            mounted = self._mount_scratch(scratch, scratch_bytes)
            if not mounted and in_memory_area(parent):
                # Not in the small folder every such job of this process shares: a script
                # could fill it for the others. A folder of its own, swept like a job's.
                scratch.rmdir()
                scratch = Path(
                    tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=work_root or parent)
                )
            try:
                session = SandboxSession(self, scratch, slot, work_root)
                for folder in (session.home, session.output_dir):
                    folder.mkdir()
                    if slot is not None:
                        os.chown(folder, slot.uid, slot.gid)
                if slot is not None:
                    os.chmod(scratch, 0o755)
                    if not self.layers.bwrap:
                        os.chmod(parent, 0o711)  # the slot user must reach the submission
                yield session
            finally:
                # Unmounting waits for the kernel: done by the cleaner, not by this thread.
                cleanup.later(functools.partial(_remove_scratch, scratch, mounted))

    def _mount_scratch(self, scratch: Path, size: int) -> bool:
        if not self.can_mount:
            return False
        flags = syscalls.MS_NOSUID | syscalls.MS_NODEV
        try:
            syscalls.mount("chalk", str(scratch), "tmpfs", flags, f"size={size},mode=0755")
        except OSError as exc:
            self.can_mount = False
            log.warning(
                "could not mount a tmpfs for a script's scratch space (%s): its writes are "
                "capped per file only",
                exc.strerror,
            )
            return False
        return True


def _remove_scratch(scratch: Path, mounted: bool) -> None:
    if mounted:
        try:
            syscalls.detach(str(scratch))
        except OSError as exc:
            log.warning("could not unmount %s: %s", scratch, exc.strerror)
    shutil.rmtree(scratch, ignore_errors=True)


_sandboxes: dict[tuple[int, str], Sandbox] = {}
_sandboxes_lock = threading.Lock()


def get_sandbox(settings: ChalkSettings) -> Sandbox:
    """This process's sandbox for these settings (made once, after any fork)."""
    key = (os.getpid(), settings.model_dump_json())
    with _sandboxes_lock:
        if key not in _sandboxes:
            _sandboxes[key] = Sandbox(settings)
        return _sandboxes[key]
