"""Import the task packages that register custom judges and contexts.

For every package directly under ``tasks/``, its ``judges`` and ``contexts``
modules are imported (the package ``__init__`` stays light, because scoring
scripts run as ``python -m tasks.<task>.<script>`` import it on every start),
then every module named in ``CHALK_TASK_MODULES``. A package that fails to import is logged and
remembered, so a job naming one of its judges says why it is missing.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import pkgutil
import threading

from chalk_client.settings import ChalkSettings

log = logging.getLogger(__name__)

_lock = threading.Lock()
_loaded: set[str] = set()
_scanned = False
"""Whether ``tasks/`` was scanned already: once per process, not per job."""
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
                for module in pkgutil.iter_modules(folders):
                    if module.name in ("judges", "contexts"):
                        _import(f"{package.name}.{module.name}")
        for name in settings.task_modules:
            _import(name)


def failures_note() -> str:
    """A sentence naming task modules that failed to import, or ``""``."""
    if not import_failures:
        return ""
    listed = "; ".join(f"{name} ({why})" for name, why in sorted(import_failures.items()))
    return f" Task modules that failed to import: {listed}."
