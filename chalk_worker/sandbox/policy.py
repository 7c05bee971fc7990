"""The operator's allowlist of commands for executable judges."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import PurePosixPath

from chalk_client.errors import CommandRefusedError


def _matches(command: Sequence[str], prefix: Sequence[str]) -> bool:
    if not prefix or len(command) < len(prefix):
        return False
    *whole, last = prefix
    if list(command[: len(whole)]) != whole:
        return False
    candidate = command[len(whole)]
    # The last word of a prefix may be partial (``tasks.``), but never a way out of a folder.
    return candidate.startswith(last) and ".." not in PurePosixPath(candidate).parts


def check_command(command: Sequence[str], allowed: Sequence[str]) -> None:
    """Refuse ``command`` unless it starts with one of the ``allowed`` prefixes.

    Prefixes are compared word by word on the command as written (placeholders
    unfilled); the last word of a prefix may match the start of a word. With no
    prefixes configured, every command is allowed (it still runs sandboxed).
    """
    if not allowed:
        return
    if any(_matches(command, shlex.split(prefix)) for prefix in allowed):
        return
    raise CommandRefusedError(
        f"command {shlex.join(command)!r} is not allowed on this worker; allowed prefixes: "
        f"{', '.join(repr(p) for p in allowed)} (operators set them with CHALK_ALLOWED_COMMANDS)"
    )
