"""Warm Python: a script forked from a started interpreter behaves as the cold command would.

Each command runs twice in one sandbox session: warm (forked from a fork
server's interpreter) and cold (a new interpreter executed from a lean fork
server). Exit status, stdout and stderr must be equal, memory addresses aside.
Commands the warm path cannot honour must fall back to a cold run.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from chalk_client import ChalkSettings
from chalk_worker.sandbox import Sandbox, detect_layers, get_sandbox
from chalk_worker.sandbox.environment import script_env
from chalk_worker.sandbox.process import ProcessLimits, ProcessOutcome
from chalk_worker.sandbox.pycommand import parse_python_command

LAYERS = detect_layers()
pytestmark = pytest.mark.skipif(
    not {"user", "namespaces"} <= set(LAYERS.available) and os.environ.get("CI") != "true",
    reason="needs root and bubblewrap (CI has them)",
)
DATA = Path(__file__).parent / "data"
LIMITS = ProcessLimits(wall_s=60, file_size_bytes=64 << 20)
ADDRESS = re.compile(r"0x[0-9a-f]{6,}")

Runner = Callable[..., tuple[ProcessOutcome, ProcessOutcome]]


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    """The sandbox of this test process, warm Python on."""
    sandbox = get_sandbox(ChalkSettings(warm_python=True))
    if sandbox.warm_servers() is None:
        pytest.skip("fork servers are off on this machine")
    return sandbox


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder the sandbox user can read, for scripts and packages."""
    tmp_path.chmod(0o755)
    return tmp_path


@pytest.fixture
def both(sandbox: Sandbox, folder: Path) -> Iterator[Runner]:
    """Run ``[python, *args]`` warm and cold; returns both outcomes, checked for how they ran."""
    jobs = folder / "jobs"
    jobs.mkdir(mode=0o755)

    def run(
        *args: str, cwd: Path | None = None, expect: str = "warm", python_path: str | None = None
    ) -> tuple[ProcessOutcome, ProcessOutcome]:
        argv = [sys.executable, *args]
        with sandbox.session(jobs, LIMITS.file_size_bytes) as session:
            where = cwd or session.home
            env = script_env(session.home, isolated=True, own_python=True)  # {python}'s
            if python_path is not None:
                env["PYTHONPATH"] = python_path
            common = {"cwd": where, "env": env, "limits": LIMITS, "readonly": [folder, DATA]}
            warm = session.run(argv, python=parse_python_command(argv), **common)  # type: ignore[arg-type]
            cold = session.run(argv, python=None, **common)  # type: ignore[arg-type]
        assert warm.started == expect, warm
        assert cold.started == "forked", cold
        return warm, cold

    yield run


def same(warm: ProcessOutcome, cold: ProcessOutcome) -> None:
    """The two runs ended alike and printed the same."""
    assert warm.start_error is None and cold.start_error is None
    assert (warm.returncode, warm.timed_out) == (cold.returncode, cold.timed_out)
    assert ADDRESS.sub("0x?", warm.stdout) == ADDRESS.sub("0x?", cold.stdout)
    assert ADDRESS.sub("0x?", warm.stderr) == ADDRESS.sub("0x?", cold.stderr)


def write(folder: Path, name: str, text: str | bytes) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    path.chmod(0o644)
    return path


def test_everything_a_script_observes_is_the_same(both, folder):
    script = str(DATA / "observe.py")
    code = (DATA / "observe.py").read_text()
    shutil.copy(DATA / "observe.py", folder / "observe.py")
    (folder / "observe.py").chmod(0o644)
    for args, cwd in (
        ((script, "an argument", "é"), None),
        (("-c", code, "x", "--flag"), None),
        (("-m", "observe", "an argument"), folder),
    ):
        warm, cold = both(*args, cwd=cwd)
        same(warm, cold)
        assert warm.returncode == 0, warm.stderr
        assert '"argv": [' in warm.stdout


@pytest.mark.parametrize(
    "code",
    [
        "pass",
        "import sys; sys.exit(3)",
        "import sys; sys.exit('goodbye')",
        "import sys; sys.exit(None)",
        "import sys; sys.exit(2 ** 40)",
        "import sys; sys.exit(-1)",
        "import sys; sys.exit(2 ** 70)",
        "import sys; sys.exit(True)",
        "raise ValueError('boom')",
        "raise KeyboardInterrupt",
        "import os, signal; os.kill(os.getpid(), signal.SIGTERM)",
        "import os; print('buffered', end=''); os._exit(7)",
        "def broken(:",
        "undefined_name",
        "try:\n    1 / 0\nexcept Exception as exc:\n    raise KeyError('k') from exc",
        "try:\n    1 / 0\nexcept Exception:\n    raise KeyError('k')",
        "def f(): f()\nf()",
        "import sys\ndepth = 0\ndef f():\n    global depth\n    depth += 1\n    f()\n"
        "try:\n    f()\nexcept RecursionError:\n    print(depth, sys.getrecursionlimit())",
        "import sys\nsys.setrecursionlimit(3000)\ndef f(n): return n if n > 2980 else f(n + 1)\n"
        "print(f(0))",
        "import atexit; atexit.register(print, 'at exit'); print('first', end='')",
        "import atexit, sys; atexit.register(lambda: print('__file__' in globals())); sys.exit(4)",
        "import atexit; atexit.register(lambda: 1 / 0)",
        "import threading, time\n"
        "threading.Thread(target=lambda: (time.sleep(0.2), print('late'))).start()",
        "import threading, time\n"
        "threading.Thread(target=lambda: (time.sleep(9), print('never')), daemon=True).start()",
        "import sys\nsys.excepthook = lambda *info: print('hooked', info[0].__name__)\n"
        "raise OSError",
        "import sys\nsys.excepthook = None\nraise OSError('no hook')",
        "import sys\ndef hook(*info): raise RuntimeError('in hook')\n"
        "sys.excepthook = hook\nraise OSError",
        "import sys\ndef hook(*info): sys.exit(9)\nsys.excepthook = hook\nraise OSError",
        "import sys; print(repr(sys.stdin.read())); print(sys.stdin.isatty())",
        "import sys; sys.stdout.write('o' * 70000); sys.stderr.write('e' * 70000)",
        "import sys; print('x'); sys.stdout.close()",
        "print('é ✓ \\udce9')",
        "import sys; print(sys.argv, __name__, __doc__, __spec__, __package__)",
        "print(__file__)",
        "import warnings; warnings.warn('careful'); warnings.warn('old', DeprecationWarning)",
        "import random, os; print(len(str(random.random())) > 2, len(os.urandom(4)))",
        "import json, subprocess\n"
        "shell = 'echo $PWD; env | grep -v TOKEN | sort'\n"
        "done = subprocess.run(['sh', '-c', shell], capture_output=True)\n"
        "print(done.stdout.decode())",
    ],
)
def test_code_ends_and_prints_as_cold(both, code):
    same(*both("-c", code, "an", "argument"))


def test_modules_run_as_main_as_cold(both, folder):
    write(folder, "pkg/__init__.py", "ROOT = 'package'\n")
    write(folder, "pkg/helper.py", "VALUE = 42\n")
    write(folder, "pkg/__main__.py", "from . import helper\nprint('main of pkg', helper.VALUE)\n")
    write(
        folder,
        "pkg/tool.py",
        "import sys\nfrom .helper import VALUE\n"
        "if __name__ == '__main__':\n    print(sys.argv, VALUE, __spec__.name)\n"
        "    raise SystemExit(5)\n",
    )
    write(folder, "pkg/fails.py", "def go():\n    raise LookupError('deep')\ngo()\n")
    write(folder, "pkg/deep.py", "def f(n):\n    return f(n + 1)\nf(0)\n")
    write(
        folder,
        "pkg/depth.py",
        "depth = 0\ndef f():\n    global depth\n    depth += 1\n    f()\n"
        "try:\n    f()\nexcept RecursionError:\n    print(depth)\n",
    )
    for args in (
        ("-m", "pkg"),
        ("-m", "pkg.tool", "--option", "value"),
        ("-m", "pkg.fails"),
        ("-m", "pkg.deep"),
        ("-m", "pkg.depth"),
        ("-m", "no_such_module"),
        ("-m", "pkg.no_such"),
        ("-m", "json.tool"),  # reads the empty stdin
        ("-m", "tasks.example_task.scoring_script"),  # too few arguments: an IndexError
    ):
        same(*both(*args, cwd=folder))


def test_scripts_run_as_cold(both, folder):
    plain = write(
        folder,
        "tools/grade.py",
        "import sys, helper\n"
        "if __name__ == '__main__':\n"
        "    print(sys.argv, sys.path[0], __file__, helper.NAME)\n",
    )
    write(folder, "tools/helper.py", "NAME = 'sibling'\n")
    latin = write(
        folder, "latin.py", "# -*- coding: latin-1 -*-\nprint('caf\xe9')\n".encode("latin-1")
    )
    bom = write(folder, "bom.py", b"\xef\xbb\xbfprint('with a BOM')\n")
    failing = write(folder, "failing.py", "print('before')\nraise ValueError('in a script')\n")
    write(
        folder,
        "exits.py",
        "import atexit, sys\natexit.register(lambda: print(__file__))\n"
        "sys.exit('bye' if len(sys.argv) > 1 else 0)\n",
    )
    deep = write(folder, "deep.py", "def f(n):\n    return f(n + 1)\nf(0)\n")
    syntax = write(folder, "syntax.py", "print('x'\n")
    linked = folder / "linked.py"
    linked.symlink_to(plain)
    for args, cwd in (
        ((str(plain), "a", "b"), None),
        (("tools/grade.py",), folder),  # a relative path, from the working folder
        (("./tools/../tools/grade.py", "x"), folder),
        ((str(linked),), None),  # sys.path[0] is the real script's folder
        ((str(latin),), None),
        ((str(bom),), None),
        ((str(failing),), None),
        ((str(deep),), None),
        (("exits.py",), folder),
        (("exits.py", "with a message"), folder),
        ((str(syntax),), None),
    ):
        same(*both(*args, cwd=cwd))


def test_commands_the_warm_path_cannot_honour_run_cold(both, folder):
    # A module beside the script that the server already imported (json): cold Python
    # imports the local one, so the run is cold.
    shadowed = write(folder, "shadow/grade.py", "import json\nprint(json.WHO)\n")
    write(folder, "shadow/json.py", "WHO = 'the local json'\n")
    warm, cold = both(str(shadowed), expect="forked")
    same(warm, cold)
    assert warm.stdout == "the local json\n"
    # -c in a working folder that holds such a module.
    warm, cold = both("-c", "import json; print(json.WHO)", cwd=shadowed.parent, expect="forked")
    same(warm, cold)
    # A zip application, a missing script, one the sandbox user may not read.
    archive = folder / "app.pyz"
    with zipfile.ZipFile(archive, "w") as app:
        app.writestr("__main__.py", "print('from the zip')")
    archive.chmod(0o644)
    closed = write(folder, "closed.py", "print('secret')\n")
    closed.chmod(0o600)
    for args in ((str(archive),), (str(folder / "missing.py"),), (str(closed),)):
        warm, cold = both(*args, expect="forked")
        same(warm, cold)
    # A PYTHONPATH other than the server's own: its Python started with another sys.path.
    warm, cold = both("-c", "import sys; print(sys.path)", python_path=str(folder), expect="forked")
    same(warm, cold)
    assert str(folder) in warm.stdout
    # Options, and the program on stdin, are never warm.
    for argv in (["-u", "-c", "pass"], ["-X", "dev", "x.py"], ["-"], [], ["-c"], ["-m", ""]):
        assert parse_python_command([sys.executable, *argv]) is None
    assert parse_python_command([sys.executable, "-c", "x" * (128 * 1024)]) is None
    assert parse_python_command([sys.executable, "-c", "print(1)\0"]) is None
