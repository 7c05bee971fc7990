"""Import the task packages that register custom judges and contexts.

For every package directly under ``tasks/``, the worker imports the package
itself, its ``judges`` and ``contexts`` modules, and every other module of the
package (in subpackages too) whose source calls ``register_judge`` or
``register_context``; then every module named in ``CHALK_TASK_MODULES``.
Modules that register nothing, scoring scripts above all, are not imported: a
script without an ``if __name__ == "__main__":`` guard must never run inside
the worker. A module that fails to import is logged and remembered, so a job
naming one of its judges says why it is missing, and which modules were imported.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import pkgutil
import re
import threading
from pathlib import Path

from chalk_client.settings import ChalkSettings

log = logging.getLogger(__name__)

_lock = threading.Lock()
_loaded: set[str] = set()
_scanned = False
"""Whether ``tasks/`` was scanned already: once per process, not per job."""
import_failures: dict[str, str] = {}
"""Module name → why it could not be imported."""
ALWAYS = ("judges", "contexts")
"""Modules of a task package imported whether or not they seem to register anything."""
REGISTERS = re.compile(rb"\bregister_(?:judge|context)\b")
"""What the source of a module that registers a custom judge or context holds."""
MAX_SOURCE_BYTES = 1024 * 1024
"""How much of a file is read to look for a registration."""


def _import(name: str) -> None:
    if name in _loaded:
        return
    _loaded.add(name)
    try:
        importlib.import_module(name)
    except Exception as exc:  # a broken task package must not take the worker down
        import_failures[name] = f"{type(exc).__name__}: {exc}"
        log.error("could not import task module %s: %s", name, import_failures[name])


def _registers(path: Path) -> bool:
    """Whether the source file at ``path`` mentions ``register_judge`` or ``register_context``."""
    try:
        with path.open("rb") as source:
            return REGISTERS.search(source.read(MAX_SOURCE_BYTES)) is not None
    except OSError:
        return False


def task_modules(package: str, folder: Path) -> list[str]:
    """The modules of the task package ``package`` (in ``folder``) that the worker imports.

    Its ``judges`` and ``contexts`` modules, and the others whose source registers
    something; subpackages (folders with an ``__init__.py``) are searched too. Nothing
    is imported to find them.
    """
    found: list[str] = []
    for path in sorted(folder.rglob("*.py")):
        parts = path.relative_to(folder).with_suffix("").parts
        if any(not part.isidentifier() for part in parts):
            continue  # not importable: __pycache__, a hidden folder, "my-script.py"
        packages = [folder.joinpath(*parts[:depth]) for depth in range(1, len(parts))]
        if any(not (inside / "__init__.py").is_file() for inside in packages):
            continue  # in a plain folder, not a subpackage
        if parts[-1] == "__init__":
            parts = parts[:-1]
            if not parts:
                continue  # the package itself: imported anyway
        if parts[-1] in ALWAYS or _registers(path):
            found.append(".".join((package, *parts)))
    return found


def load_task_modules(settings: ChalkSettings) -> None:
    """Import ``tasks.*`` packages and ``settings.task_modules`` once per process."""
    global _scanned
    with _lock:
        try:
            import tasks
        except ImportError:
            tasks = None  # type: ignore[assignment]
        if tasks is not None and not _scanned:
            _scanned = True
            for package in pkgutil.iter_modules(tasks.__path__, prefix="tasks."):
                if not package.ispkg:
                    continue
                _import(package.name)
                spec = importlib.util.find_spec(package.name)
                folders = (spec.submodule_search_locations if spec else None) or []
                for folder in folders:
                    for name in task_modules(package.name, Path(folder)):
                        _import(name)
        for name in settings.task_modules:
            _import(name)


def failures_note() -> str:
    """Sentences for an unknown-judge error: the task modules imported, and those that failed."""
    imported = sorted(_loaded - set(import_failures))
    note = (
        f" This worker imported {', '.join(imported) or 'no task module'}: in each package "
        "under tasks/, the package, its judges and contexts modules and every module that "
        "calls register_judge or register_context; and the modules in CHALK_TASK_MODULES."
    )
    if import_failures:
        listed = "; ".join(f"{name} ({why})" for name, why in sorted(import_failures.items()))
        note += f" Task modules that failed to import: {listed}."
    return note
