"""Import the task packages that register custom judges and contexts.

Every package directly under ``tasks/`` is imported, then every module named in
``CHALK_TASK_MODULES``. A package that fails to import is logged and
remembered, so a job naming one of its judges says why it is missing.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
import threading

from chalk_client.settings import ChalkSettings

log = logging.getLogger(__name__)

_lock = threading.Lock()
_loaded: set[str] = set()
import_failures: dict[str, str] = {}
"""Module name → why it could not be imported."""


def _import(name: str) -> None:
    if name in _loaded:
        return
    _loaded.add(name)
    try:
        importlib.import_module(name)
    except Exception as exc:  # a broken task package must not take the worker down
        import_failures[name] = f"{type(exc).__name__}: {exc}"
        log.error("could not import task module %s: %s", name, import_failures[name])


def load_task_modules(settings: ChalkSettings) -> None:
    """Import ``tasks.*`` packages and ``settings.task_modules`` once per process."""
    with _lock:
        try:
            import tasks
        except ImportError:
            tasks = None  # type: ignore[assignment]
        if tasks is not None:
            for module in pkgutil.iter_modules(tasks.__path__, prefix="tasks."):
                if module.ispkg:
                    _import(module.name)
        for name in settings.task_modules:
            _import(name)


def failures_note() -> str:
    """A sentence naming task modules that failed to import, or ``""``."""
    if not import_failures:
        return ""
    listed = "; ".join(f"{name} ({why})" for name, why in sorted(import_failures.items()))
    return f" Task modules that failed to import: {listed}."
