"""The environment a scoring script gets: none of the worker's variables, only what it needs."""

from __future__ import annotations

import os
from pathlib import Path

from chalk_worker.sandbox.bwrap import import_roots, own_python_roots


def script_env(home: Path, isolated: bool, own_python: bool = False) -> dict[str, str]:
    """A clean environment: nothing of the worker's secrets, just what a script needs.

    ``isolated``: the script has a private ``/tmp`` (bubblewrap), else its
    ``TMPDIR`` is its home. ``own_python``: the command runs the worker's own
    Python (``{python}``), which may find ``tasks`` and ``chalk_client`` by itself.
    """
    given = _worker_python_path()
    roots = own_python_roots() if own_python and not given else import_roots()
    python_path = [*roots, *given]
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": str(home),
        "TMPDIR": "/tmp" if isolated else str(home),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
    }
    if python_path:
        env["PYTHONPATH"] = os.pathsep.join(python_path)
    return env


def _worker_python_path() -> list[str]:
    """The worker's own ``PYTHONPATH``, its relative entries made absolute against the
    worker's working folder, as the worker itself reads them: a script's working
    folder may be the submission, where a student's module would otherwise be
    imported in place of the one the worker meant."""
    given = os.environ.get("PYTHONPATH")
    if not given:
        return []
    return [os.path.abspath(entry) if entry else os.getcwd() for entry in given.split(os.pathsep)]
