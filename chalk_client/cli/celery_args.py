"""What ``chalk worker`` and ``chalk flower`` add to Celery's and Flower's command lines.

``chalk worker --help`` and ``chalk flower --help`` say it before Celery's own help
(no cluster needed to read help). Flower's options are Tornado's, which take
``--port=5555`` only; ``chalk flower`` also takes ``--port 5555``, as every other
command does, and names an unknown option instead of failing with a traceback.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence

from chalk_client.errors import ConfigurationError

WORKER_PREFACE = """\
chalk worker: Celery's worker, for Chalk's app (chalk_worker.app). It needs CHALK_REDIS_URL.
Unless you give them, chalk worker adds: --pool threads, --concurrency 64 (with the threads
pool; another pool keeps Celery's default), --loglevel INFO, --without-mingle, --without-gossip.
Every Celery worker option passes through, e.g. --concurrency 128 -n second@%h.
With the threads pool it runs one worker process per usable core (each a Celery worker
named NAME-1@HOST, NAME-2@HOST, ..., sharing --concurrency), and says so at start;
--processes N (or CHALK_WORKER_PROCESSES=N) sets how many, --processes 1 runs one.
Run it as root: it then runs each scoring script as an unprivileged user of its own
(uid CHALK_SANDBOX_UID_BASE + slot) inside the sandbox; scripts never run as root.

Celery's own help follows.
"""

FLOWER_PREFACE = """\
chalk flower: Flower, watching the workers of Chalk's app (chalk_worker.app). It needs
CHALK_REDIS_URL, and FLOWER_BASIC_AUTH=user:password unless Flower stays on a private host.
Unless you set them (as flags or FLOWER_* variables), chalk flower adds:
  {defaults}
Options take their value as --port=5555 or --port 5555.

Flower's options:
"""

ROOT_NOTE = (
    "chalk worker: running as root, as Chalk intends: the worker needs root to run each "
    "scoring script as an unprivileged user of its own (uid CHALK_SANDBOX_UID_BASE + slot, no "
    "capabilities) inside the sandbox, and scripts never run as root. Celery's warning below "
    "about superuser privileges is written for workers that run tasks' code themselves; "
    "Chalk's tasks carry only a job id, as JSON (never pickle)."
)
"""Said before Celery's superuser warning, which a root worker always prints."""


def wants_help(args: Sequence[str]) -> bool:
    """Whether the command line asks for help."""
    return any(arg in ("--help", "-h") for arg in args)


def _flower_options() -> dict[str, bool]:
    """Flower's options by name, each ``True`` when it is a switch (takes no value)."""
    from flower.options import options  # Tornado's registry, filled by importing Flower's options

    return {name: option.type is bool for name, option in options._options.items()}


def flower_help(defaults: Sequence[str]) -> str:
    """``chalk flower --help``: what Chalk adds, then Flower's own options."""
    from flower.options import options

    listing = io.StringIO()
    options.print_help(listing)
    shown = listing.getvalue().split("\n", 1)[-1]  # without Tornado's "Usage: ..." line
    # Tornado heads each group with the file defining it: name the package instead.
    shown = re.sub(r"(?m)^\S*/(\w+)/\w+\.py options:$", r"\1's options:", shown)
    return FLOWER_PREFACE.format(defaults="\n  ".join(defaults) or "(nothing)") + shown


def flower_args(args: Sequence[str]) -> list[str]:
    """Flower's arguments with ``--name value`` joined as ``--name=value``, as Tornado needs.

    Raises ``ConfigurationError`` naming an argument that is not a Flower option,
    or an option that needs a value and has none.
    """
    known = _flower_options()
    joined: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if not arg.startswith("--"):
            raise ConfigurationError(
                f"chalk flower takes Flower's options only (--name=value or --name value); "
                f"{arg!r} is not one. See chalk flower --help"
            )
        name, equals, _ = arg[2:].partition("=")
        name = name.replace("_", "-")
        if name not in known:
            raise ConfigurationError(
                f"--{name} is not a Flower option; see chalk flower --help for them all"
            )
        if equals or known[name]:
            joined.append(arg)
            continue
        if index >= len(args) or args[index].startswith("--"):
            raise ConfigurationError(f"--{name} needs a value, e.g. --{name}=VALUE")
        joined.append(f"{arg}={args[index]}")
        index += 1
    return joined
