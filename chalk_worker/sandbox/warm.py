"""What a warm fork server imports before its first run.

The standard modules scoring scripts and tests import most (their import is
most of a short script's start-up), ``runpy`` (for ``-m``), and the task
packages under ``tasks/`` (their ``__init__`` only: scripts run as
``python -m tasks.<task>.<script>`` import them). Everything imported costs
memory in every server and a little time in every fork, so the list is short.
"""

from __future__ import annotations

import os
import pkgutil

from chalk_client.settings import ChalkSettings
from chalk_worker.sandbox.probe import SandboxLayers

STANDARD_MODULES = (
    "runpy",
    "argparse",
    "collections",
    "copy",
    "dataclasses",
    "functools",
    "heapq",
    "itertools",
    "json",
    "math",
    "pathlib",
    "random",
    "re",
    "string",
    "subprocess",
    "tempfile",
    "textwrap",
    "traceback",
    "typing",
)
"""Standard modules every warm server imports."""


def preload_modules(with_tasks: bool = True) -> list[str]:
    """The standard modules above and (``with_tasks``) the packages directly under ``tasks/``."""
    names = list(STANDARD_MODULES)
    if not with_tasks:
        return names
    try:
        import tasks
    except ImportError:
        return names
    names.append("tasks")
    names += [
        module.name
        for module in pkgutil.iter_modules(tasks.__path__, prefix="tasks.")
        if module.ispkg
    ]
    return names


def preloaded_files(names: list[str]) -> list[str]:
    """The source files of the modules among ``names`` that are not the standard library's.

    A server imported them when it started: when one changes on disk, servers
    started before are replaced (their copy is stale).
    """
    import importlib.util

    files = []
    for name in names:
        if name in STANDARD_MODULES:
            continue
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.origin and os.path.isfile(spec.origin):
            files.append(spec.origin)
    return files


def warm_python_report(settings: ChalkSettings, layers: SandboxLayers) -> str:
    """One line for ``chalk health`` and the logs: whether ``{python}`` scripts start warm."""
    if not settings.warm_python:
        return "warm python: OFF - CHALK_WARM_PYTHON=false: every script starts a new interpreter"
    if not (layers.root and layers.bwrap and "user" in layers.available):
        return "warm python: OFF - fork servers need root and bubblewrap"
    from chalk_worker.sandbox import syscalls

    try:
        os.close(syscalls.open_tree_clone("/"))
    except OSError as exc:
        return f"warm python: OFF - this kernel cannot make detached mounts ({exc.strerror})"
    return (
        "warm python: on ({python} scripts fork from an interpreter already started in the "
        "sandbox; CHALK_WARM_PYTHON=false turns it off)"
    )
