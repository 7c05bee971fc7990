"""What a sandboxed script sees: a bubblewrap command line built from an allowlist of paths.

The script gets a new root with the system folders read-only, the Python that
runs the worker (and its packages) read-only at the same paths, the ``tasks``
and ``chalk_client`` packages, the job's submission read-only, its own scratch
folder writable, a private ``/tmp``, a fresh ``/proc`` for its own PID
namespace, a minimal ``/dev`` and no network. Nothing else of the host exists
for it: not ``/root``, not ``/home``, not the worker's job folders.
"""

from __future__ import annotations

import functools
import json
import os
import site
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from chalk_worker.sandbox.wire import ViewEntry, ViewKind

SYSTEM_PATHS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""System folders shown read-only (or as the symlinks they are)."""


def _package_dir(name: str) -> Path | None:
    try:
        module = __import__(name)
    except ImportError:
        return None
    locations = list(getattr(module, "__path__", []))
    return Path(locations[0]).resolve() if locations else None


def python_paths() -> list[Path]:
    """Folders a script needs to run ``{python}`` and import ``tasks`` and ``chalk_client``."""
    found = {
        Path(sys.base_prefix).resolve(),
        Path(sys.prefix).resolve(),
        Path(sys.prefix),
        Path(os.path.realpath(sys.executable)).parent.parent,
        Path(sys.executable).parent.parent,
    }
    found.update(Path(p) for p in site.getsitepackages() if os.path.isdir(p))
    for name in ("tasks", "chalk_client"):
        package = _package_dir(name)
        if package is not None:
            found.add(package)
    return sorted(found)


def task_folders() -> list[Path]:
    """The folder of the ``tasks`` package this process imports (real path), if any: task
    data a student's program must not read is there (a ``tests`` judge's tests files)."""
    folder = _packages()["tasks"]
    return [folder] if folder is not None else []


@functools.cache
def _packages() -> dict[str, Path | None]:
    """Where this process imports ``tasks`` and ``chalk_client`` from (real paths), once."""
    return {name: _package_dir(name) for name in ("tasks", "chalk_client")}


@functools.cache
def import_roots() -> tuple[str, ...]:
    """Folders to put on ``PYTHONPATH`` so ``tasks`` and ``chalk_client`` import.

    Found once per process (the packages do not move): every script's
    environment names them, except where ``own_python_roots`` finds them unneeded.
    """
    roots: list[str] = []
    for package in _packages().values():
        if package is not None and str(package.parent) not in roots:
            roots.append(str(package.parent))
    return tuple(roots)


@functools.cache
def own_python_roots() -> tuple[str, ...]:
    """``import_roots`` for a command that runs the worker's own Python (``{python}``)
    in a worker started without ``PYTHONPATH``: none where that Python, started as
    a script's is, finds the very same packages by itself (installed, or installed
    in editable mode), at their real paths.

    Each folder on ``PYTHONPATH`` costs every Python start a look there for each
    module it imports (~0.6 ms of a cold script here). Any doubt keeps the
    folders: a worker run from a checkout that another copy shadows, a package
    reached through a link (the sandbox shows real paths only), a failed check.
    Other commands (``python3``, a shell script) keep them: another interpreter
    would not find the packages, or would find its own.
    """
    roots = import_roots()
    return () if roots and _found_alike(_packages()) else roots


@functools.cache
def _root_paths() -> tuple[Path, ...]:
    return tuple(Path(root) for root in import_roots())


def beside_packages(paths: Iterable[str | Path]) -> bool:
    """Whether any of ``paths`` (allowlisted, or named by a command) is one of the
    ``import_roots`` or inside one: a script shown more of such a folder than the
    packages may import from it by the folder's place on ``PYTHONPATH``, which then
    stays (``own_python_roots`` is not used)."""
    return any(_covered(Path(os.path.abspath(path)), _root_paths()) for path in paths)


_PROBE = (
    "import importlib.util, json\n"
    "found = {}\n"
    "for name in {names}:\n"
    "    spec = importlib.util.find_spec(name)\n"
    "    places = list(spec.submodule_search_locations or []) if spec else []\n"
    "    found[name] = places[0] if places else None\n"
    "print(json.dumps(found))\n"
)
"""Where a new interpreter finds each package, without running the packages' code."""


def _found_alike(packages: dict[str, Path | None]) -> bool:
    """Whether this Python, started with a script's environment but no ``PYTHONPATH``,
    finds ``packages`` at exactly the (real) paths this process found them at."""
    names = [name for name, package in packages.items() if package is not None]
    found = _found_by_new_python(names)
    # As found, not resolved: a path through a link does not exist in the sandbox.
    return bool(names) and all(found.get(name) == str(packages[name]) for name in names)


def _found_by_new_python(names: list[str]) -> dict[str, str | None]:
    """Where a child of this Python finds each package (``{}`` if it cannot say).

    Run outside the sandbox, from ``/`` and with a ``HOME`` that does not exist
    (a script's home has no user site-packages either).
    """
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": "/nonexistent",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    try:
        answer = subprocess.run(
            [sys.executable, "-c", _PROBE.replace("{names}", repr(names))],
            cwd="/",
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
            check=True,
        )
        found: dict[str, str | None] = json.loads(answer.stdout.decode().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return {}  # the folders go on PYTHONPATH, as they always may
    return found


def _covered(path: Path, binds: Iterable[Path]) -> bool:
    return any(path == bind or bind in path.parents for bind in binds)


def view_entries(
    *,
    readonly: Sequence[Path],
    writable: Sequence[Path],
    tmp_bytes: int,
    hide: Path | None = None,
    conceal: Sequence[Path] = (),
) -> list[ViewEntry]:
    """The steps that build a sandbox's root, parents first, as bubblewrap takes them.

    The system folders (or the links they are), ``/proc``, a minimal ``/dev``,
    a private ``/tmp``, then each allowlisted path with the folders above it.
    ``hide``: a folder shown empty (a tmpfs) before the paths inside it are bound.
    ``conceal``: folders shown empty once all is bound (none holding a writable path).
    """
    entries: list[ViewEntry] = []
    system = []
    for name in SYSTEM_PATHS:
        if os.path.islink(name):
            entries.append(("symlink", name, os.readlink(name)))
        elif os.path.isdir(name):
            entries.append(("ro", name, ""))
            system.append(Path(name))
    entries += [("proc", "/proc", ""), ("dev", "/dev", ""), ("tmpfs", "/tmp", str(tmp_bytes))]
    bound: list[Path] = list(system)
    created: set[Path] = {Path("/"), Path("/tmp")}
    hidden: Path | None = None
    binds: list[tuple[Path, ViewKind]] = [(Path(p), "ro") for p in readonly]
    binds += [(Path(p), "rw") for p in writable]
    # Parents first, so a writable folder inside a read-only one is bound on top of it.
    for path, how in sorted(binds, key=lambda item: len(item[0].parts)):
        if _covered(path, system) or not path.exists():
            continue
        if hide is not None and hidden is None and hide in path.parents and _covered(hide, bound):
            entries.append(("tmpfs", str(hide), "65536"))
            created.add(hide)
            hidden = hide  # from here, no host folder below it
        for parent in reversed(path.parents):
            host = _covered(parent, bound) and not (hidden and _covered(parent, [hidden]))
            if parent in created or host:
                continue  # made already, or a real host folder inside a bind
            entries.append(("dir", str(parent), ""))
            created.add(parent)
        entries.append((how, str(path), ""))
        bound.append(path)
    for path in conceal:
        if path in bound and not any(path in folder.parents for folder in map(Path, writable)):
            entries.append(("tmpfs", str(path), "4096"))
    return entries


def render_bwrap(bwrap: str, entries: Sequence[ViewEntry], chdir: Path) -> list[str]:
    """The bubblewrap command line (up to and including ``--``) that builds ``entries``."""
    argv = [
        bwrap,
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "chalk-sandbox",
    ]
    for kind, path, detail in entries:
        if kind == "symlink":
            argv += ["--symlink", detail, path]
        elif kind == "dir":
            # Folders bwrap makes on its own are 0700: the sandbox user could not pass.
            argv += ["--perms", "0755", "--dir", path]
        elif kind in ("ro", "rw"):
            argv += ["--ro-bind" if kind == "ro" else "--bind", path, path]
        elif kind == "tmpfs":
            # /tmp open to all and sticky, as a /tmp is (the run's own): its user writes there.
            perms = ["--perms", "1777"] if path == "/tmp" else []
            argv += ["--size", detail, *perms, "--tmpfs", path]
        else:
            argv += [f"--{kind}", path]
    return [*argv, "--chdir", str(chdir), "--"]


def bwrap_argv(
    bwrap: str,
    *,
    readonly: Sequence[Path],
    writable: Sequence[Path],
    chdir: Path,
    tmp_bytes: int,
    hide: Path | None = None,
    conceal: Sequence[Path] = (),
) -> list[str]:
    """The bubblewrap arguments (up to and including ``--``) for one run."""
    entries = view_entries(
        readonly=readonly, writable=writable, tmp_bytes=tmp_bytes, hide=hide, conceal=conceal
    )
    return render_bwrap(bwrap, entries, chdir)
