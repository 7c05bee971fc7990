"""What a warm fork server imports before its first run.

The standard modules scoring scripts and tests import most (their import is
most of a short script's start-up), ``runpy`` (for ``-m``), and the task
packages under ``tasks/`` (their ``__init__`` only: scripts run as
``python -m tasks.<task>.<script>`` import them). Everything imported costs
memory in every server and a little time in every fork, so the list is short.
"""

from __future__ import annotations

import pkgutil

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


def preload_modules() -> list[str]:
    """The standard modules above and the packages directly under ``tasks/``."""
    names = list(STANDARD_MODULES)
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
