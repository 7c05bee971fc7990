"""The regex helper's program: it answers ``re.search`` requests over a pipe.

``chalk_worker.regex.pool`` runs this file as a script on the worker's own
interpreter (``python -I -S``): it imports only the standard library, so it
starts in about 50 ms and holds about 15 MB. A request is a list of patterns
and a text; the reply lists the patterns found nowhere. Before each pattern the
helper writes its index to a shared page, so that a worker that kills it for
running too long can say which pattern it was on. It exits when the pipe to the
worker closes, and within ``ORPHAN_CHECK_S`` of the worker's death even in the
middle of a search.
"""

from __future__ import annotations

import mmap
import os
import re
import signal
import sys
from collections.abc import Sequence
from multiprocessing.connection import Connection
from types import FrameType
from typing import Literal

ORPHAN_CHECK_S = 1.0
"""During a search, how often a helper checks that the worker that started it still runs."""
PROGRESS_BYTES = 4
"""Size of the page where the helper notes the pattern it is on."""
NOT_BEGUN = 0xFFFFFFFF
"""What the progress page holds before the helper begins a search's first pattern."""
READY = "ready"
"""The helper's greeting, once it is ready for requests."""
SCRIPT = os.path.abspath(__file__)
"""This file, which the worker runs as the helper."""

RegexRequest = Sequence[tuple[str, int]]
"""Patterns to search for, each as its pattern string and ``re`` flags."""
SearchReply = tuple[Literal["done"], list[int]] | tuple[Literal["error"], int, str]
"""A helper's answer: ``("done", unmatched indexes)``, or ``("error", index, why)``."""


def _search_all(patterns: RegexRequest, text: str, progress: mmap.mmap) -> SearchReply:
    unmatched: list[int] = []
    for index, (pattern, flags) in enumerate(patterns):
        progress[:PROGRESS_BYTES] = index.to_bytes(PROGRESS_BYTES, "little")
        try:
            if re.compile(pattern, flags).search(text) is None:
                unmatched.append(index)
        except Exception as exc:
            return ("error", index, f"{type(exc).__name__}: {exc}")
    return ("done", unmatched)


def serve(channel_fd: int, progress_fd: int, parent: int) -> None:
    """Answer search requests until the worker closes the pipe or dies."""

    def exit_if_orphaned(_signum: int, _frame: FrameType | None) -> None:
        # re checks for signals as it searches, so this runs even mid-search.
        if os.getppid() != parent:
            os._exit(0)

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the worker, which ends us
    signal.signal(signal.SIGALRM, exit_if_orphaned)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})  # a mask survives exec
    channel = Connection(channel_fd)
    progress = mmap.mmap(progress_fd, PROGRESS_BYTES)
    if os.getppid() != parent:
        return
    try:
        channel.send(READY)
        while True:
            try:
                patterns, text = channel.recv()
            except EOFError:
                return
            signal.setitimer(signal.ITIMER_REAL, ORPHAN_CHECK_S, ORPHAN_CHECK_S)
            try:
                reply = _search_all(patterns, text, progress)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            del patterns, text  # an idle helper holds no transcript
            channel.send(reply)
    except (BrokenPipeError, ConnectionResetError):
        return  # the worker went away while we answered


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
