"""What ``python -c CODE``, ``python -m MODULE`` and ``python SCRIPT`` do, replayed in a fork.

A warm run is a child forked from an interpreter that started long ago (the fork
server) with modules already imported. ``run_main`` makes that child look, to
the code it runs, like the interpreter the cold command would have started:
``sys.argv`` and ``sys.orig_argv``, a fresh ``__main__``, ``sys.path`` with the
command's first entry (the script's folder, the working folder, or ``''``), the
environment, new ``sys.stdin`` / ``stdout`` / ``stderr`` on descriptors 0, 1
and 2, and the end of ``Py_RunMain``: ``SystemExit`` codes, the traceback of an
uncaught exception through ``sys.excepthook``, non-daemon threads joined,
``atexit`` callbacks, streams flushed (status 120 when stdout cannot be), and
death by ``SIGINT`` after an uncaught ``KeyboardInterrupt``.

Which commands run warm, and the checks made before, are ``pycommand``'s.
Standard library only: the fork server loads this file by path (``_sibling``)
and gives it ``pycommand``, loaded the same way, before its code runs.
"""

import atexit
import contextlib
import importlib.machinery
import io
import operator
import os
import signal
import site
import sys
import types
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from chalk_worker.sandbox import pycommand

_FINAL_CODE_CHANGED = 120
"""The status of an interpreter whose standard streams could not be flushed at exit."""
_MISSING = object()


class StdioShape:
    """How this interpreter made its standard streams at start, to make them again alike."""

    def __init__(self) -> None:
        self.streams: list[tuple[str, str | None, bool, bool]] = []
        for stream in (sys.__stdin__, sys.__stdout__, sys.__stderr__):
            if stream is None:
                self.streams.append(("utf-8", "strict", False, False))
                continue
            self.streams.append(
                (
                    stream.encoding,
                    stream.errors,
                    stream.line_buffering,
                    getattr(stream, "write_through", False),
                )
            )

    def make(self) -> list[io.TextIOWrapper]:
        """New ``sys.stdin``, ``stdout`` and ``stderr`` on descriptors 0, 1 and 2."""
        made: list[io.TextIOWrapper] = []
        for fd, name, mode in ((0, "<stdin>", "r"), (1, "<stdout>", "w"), (2, "<stderr>", "w")):
            encoding, errors, line_buffering, write_through = self.streams[fd]
            buffer: Any = open(fd, mode + "b", -1, closefd=False)  # noqa: SIM115
            buffer.raw.name = name
            stream = io.TextIOWrapper(
                buffer,
                encoding=encoding,
                errors=errors,
                newline="\n",
                line_buffering=line_buffering,
                write_through=write_through,
            )
            stream.mode = mode  # type: ignore[misc]
            made.append(stream)
        return made


class RecursionBudget:
    """The calls left before ``RecursionError``, as this interpreter counts them.

    A warm program runs below the fork server's own frames; without this it
    would hit the recursion limit a few calls earlier than the cold one (a
    deep but legal recursion would fail). CPython keeps the count in the
    thread state (``recursion_remaining`` in 3.11), beside the limit; the field
    is found once by setting the limit to a probe value and looking for it.
    """

    def __init__(self) -> None:
        self.address: int | None = None
        try:
            self.address = self._find()
        except (AttributeError, OSError, ValueError):
            self.address = None

    @staticmethod
    def _find() -> int | None:
        import ctypes

        get_state = ctypes.pythonapi.PyThreadState_Get
        get_state.restype = ctypes.c_void_p
        state = get_state()
        if not state:
            return None
        limit = sys.getrecursionlimit()
        probe = limit + 4711
        sys.setrecursionlimit(probe)
        try:
            fields = (ctypes.c_int * 32).from_address(state)
            for index in range(1, 32):
                if fields[index] == probe and 0 < fields[index - 1] < probe:
                    return int(state) + 4 * (index - 1)
        finally:
            sys.setrecursionlimit(limit)
        return None

    def start_afresh(self) -> None:
        """Count as the cold interpreter does when it starts its program: no call made yet.

        Call it from the frame that then runs the program (checked against the
        cold interpreter by the tests, to the call).
        """
        if self.address is None:
            return
        import ctypes

        ctypes.c_int.from_address(self.address).value = sys.getrecursionlimit()


class Interpreter:
    """The state a fresh interpreter would start with, recorded when the server started."""

    def __init__(self, startup_modules: frozenset[str], startup_path: list[str]) -> None:
        self.base_path = list(startup_path[1:])
        """``sys.path`` after its first entry, as the startup made it."""
        self.server_path0 = startup_path[0] if startup_path else ""
        self.startup_modules = startup_modules
        """Modules every interpreter has before running anything (``-c pass``)."""
        self.stdio = StdioShape()
        self.recursion = RecursionBudget()
        self.kept: list[object] = []
        self.preloaded = frozenset(
            name.partition(".")[0] for name in sys.modules if name not in startup_modules
        )
        """Top-level names of the modules imported since start (those a folder could shadow).

        Make the ``Interpreter`` once everything is imported."""

    def run_main(
        self, argv: list[str], command: "pycommand.PythonCommand", env: list[tuple[str, str]]
    ) -> NoReturn:
        """Become the cold interpreter of ``argv`` and run its program; never returns."""
        os.environ.clear()
        os.environ.update(env)
        self._fresh_sys(argv, command)
        main = self._fresh_main()
        ended: BaseException | None = None
        try:
            _run(command, main, self.recursion)
        except BaseException as exc:
            ended = exc
        # Out of the except block: as in C, nothing counts as being handled any more.
        if isinstance(ended, SystemExit):
            # Py_Exit from inside PyErr_Print: __file__ is still there for atexit callbacks.
            _finish(_exit_status(ended), interrupted=False)
        status = 0 if ended is None else _print_uncaught(ended)
        if command.kind == "script":
            main.__dict__.pop("__file__", None)
            main.__dict__.pop("__cached__", None)
        _finish(status, interrupted=isinstance(ended, KeyboardInterrupt))

    def _fresh_sys(self, argv: list[str], command: "pycommand.PythonCommand") -> None:
        sys.argv = ["-c" if command.kind == "code" else "-m", *command.args]
        if command.kind == "script":
            sys.argv = [command.target, *command.args]
        sys.orig_argv = list(argv)
        sys.path[:] = [pycommand.first_path_entry(command), *self.base_path]
        for entry in list(sys.path_importer_cache):
            if entry == self.server_path0 or not os.path.isabs(entry):
                del sys.path_importer_cache[entry]
        if "site" in sys.modules and not sys.flags.no_site:
            site.USER_BASE = site._getuserbase()  # type: ignore[attr-defined]
            site.USER_SITE = site._get_path(site.USER_BASE)  # type: ignore[attr-defined]
        self.kept += [sys.stdin, sys.stdout, sys.stderr]  # never collected: no stray flush
        sys.stdin, sys.stdout, sys.stderr = self.stdio.make()
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr  # type: ignore[misc]

    def _fresh_main(self) -> types.ModuleType:
        main = types.ModuleType("__main__")
        main.__annotations__ = {}
        main.__dict__["__builtins__"] = sys.modules["builtins"]
        main.__loader__ = importlib.machinery.BuiltinImporter
        self.kept.append(sys.modules.get("__main__"))
        sys.modules["__main__"] = main
        return main


def _run(
    command: "pycommand.PythonCommand", main: types.ModuleType, recursion: RecursionBudget
) -> None:
    """Run the program in ``main`` (its frame is left out of tracebacks)."""
    if command.kind == "module":
        import runpy

        recursion.start_afresh()
        # Called through C, as the cold interpreter calls it: that counts one call more.
        operator.call(runpy._run_module_as_main, command.target, True)  # type: ignore[attr-defined]
        return
    if command.kind == "code":
        code = compile(command.target, "<string>", "exec", dont_inherit=True)
        recursion.start_afresh()
        exec(code, main.__dict__)
        return
    source = pycommand.read_script(command.target)
    assert isinstance(source, bytes)  # checked before the run started
    # Made absolute as the interpreter's config does it (joined, not normalised).
    path = os.path.join(os.getcwd(), command.target)
    main.__dict__["__file__"] = path
    main.__dict__["__cached__"] = None
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
    try:
        code = compile(source, path, "exec", dont_inherit=True)
        recursion.start_afresh()
        exec(code, main.__dict__)
    finally:
        _flush_quietly()


def _flush_quietly() -> None:
    for stream in (sys.stderr, sys.stdout):
        with contextlib.suppress(Exception):  # as the interpreter's own flush_io()
            if stream is not None:
                stream.flush()


def _exit_status(exc: SystemExit) -> int:
    """The status ``sys.exit(code)`` gives, as ``_Py_HandleSystemExit`` computes it."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        if not -(2**63) <= code < 2**63:
            return -1  # PyLong_AsLong overflows
        low = code & 0xFFFFFFFF
        return low - 2**32 if low >= 2**31 else low  # the C cast to int
    with contextlib.suppress(Exception):  # nothing more to say it with
        sys.stderr.write(str(code) + "\n")
    return 1


def _strip_own_frames(exc: BaseException) -> types.TracebackType | None:
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code in _OWN_CODE:
        tb = tb.tb_next
    exc.__traceback__ = tb
    return tb


def _print_uncaught(exc: BaseException) -> int:
    """``PyErr_Print``: ``sys.last_*``, then ``sys.excepthook``; the status is 1."""
    tb = _strip_own_frames(exc)
    sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, tb
    hook: Any = getattr(sys, "excepthook", _MISSING)
    if hook is _MISSING:
        sys.stderr.write("sys.excepthook is missing\n")
        sys.__excepthook__(type(exc), exc, tb)
        return 1
    try:
        hook(type(exc), exc, tb)
    except SystemExit as inner:
        _finish(_exit_status(inner), interrupted=False)
    except BaseException as broken:
        sys.stderr.write("Error in sys.excepthook:\n")
        sys.__excepthook__(type(broken), broken, _strip_own_frames(broken))
        sys.stderr.write("\nOriginal exception was:\n")
        sys.__excepthook__(type(exc), exc, tb)
    return 1


def _finish(status: int, interrupted: bool) -> NoReturn:
    """``Py_FinalizeEx`` as far as a program sees it, then exit with ``status``."""
    threading = sys.modules.get("threading")
    if threading is not None:
        with contextlib.suppress(BaseException):  # as wait_for_thread_shutdown()
            threading._shutdown()
    atexit._run_exitfuncs()
    if not _flush_at_exit():
        status = _FINAL_CODE_CHANGED
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(status & 0xFF)


def _flush_at_exit() -> bool:
    ok = True
    stdout, stderr = getattr(sys, "stdout", None), getattr(sys, "stderr", None)
    if stdout is not None and not getattr(stdout, "closed", True):
        try:
            stdout.flush()
        except Exception as exc:
            ok = False
            try:
                sys.stderr.write(f"Exception ignored in: {stdout!r}\n")
                sys.__excepthook__(type(exc), exc, exc.__traceback__)
            except Exception:  # stderr is gone too
                pass
    if stderr is not None and not getattr(stderr, "closed", True):
        try:
            stderr.flush()
        except Exception:
            ok = False
    return ok


_OWN_CODE = frozenset({_run.__code__, Interpreter.run_main.__code__, _print_uncaught.__code__})
