"""What a client-only install lacks: the worker's packages, named in a clear error.

``pip install chalk-queue`` installs the client (models, ``ChalkClient``, the
cluster verbs of ``chalk``). Scoring in this process and running workers need
``pip install "chalk-queue[worker]"``; ``require_worker`` says so before
anything half-starts.
"""

from __future__ import annotations

import importlib.util

from chalk_client.errors import ConfigurationError

WORKER_PACKAGES = ("celery", "flower", "openai", "psutil", "prometheus_client")
"""The modules of the ``worker`` extra."""


def require_worker(what: str, *, or_else: str = "") -> None:
    """Raise ``ConfigurationError`` if a package of the ``worker`` extra is missing.

    ``what`` needs them (``"chalk worker"``); ``or_else`` is another way out, if any.
    """
    missing = [name for name in WORKER_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        other = f" ({or_else})" if or_else else ""
        raise ConfigurationError(
            f"{what} needs the worker's packages, and this install lacks "
            f"{', '.join(missing)}: pip install 'chalk-queue[worker]'{other}"
        )
