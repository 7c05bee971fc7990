"""Regex helpers: ``re.search`` in long-lived helper processes that can be killed.

Python's ``re`` holds the GIL for the whole of a search and cannot be stopped
from another thread, so one catastrophic pattern (``(a+)+$`` on a line of
``a`` ending in ``b``) would freeze the worker, its lease renewal and its
presence with it. Regex judges therefore search in helper processes: the event
loop waits on the helper's pipe, and a search that runs past its time limit
costs only its helper, killed with ``SIGKILL`` and replaced when next needed.

- A helper runs ``chalk_worker/regex/search.py`` as a script on the worker's
  interpreter, isolated (``python -I -S``), started by fork-and-exec as
  ``spawn`` does (safe in a threaded parent). It imports only the standard
  library, so it starts in about 50 ms and holds about 15 MB
  (``multiprocessing``'s spawn would import the worker's main module and this
  package: 1.5 s and 66 MB). It searches with the worker's own ``re``: verdicts
  are exactly those of the worker.
- Each worker process has one pool, made on first use (and again after a
  fork), shared by all its event loops: at most one helper per CPU core,
  started lazily and reused across jobs. A search is one request and one
  reply, whatever the number of patterns; when every helper is busy, searches
  wait their turn.
- A helper that dies during a search (the out-of-memory killer, say) is
  replaced and the search tried once more on a fresh one before it is reported.
- Helpers are killed when the worker process exits; they exit by themselves
  when the pipe to the worker closes, and within a second of the worker's
  death even in the middle of a search.

``asyncio`` is imported only when a search is made.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Pipe
from typing import TYPE_CHECKING, TypeVar

from chalk_client.cores import cores_per_process
from chalk_worker.regex.search import (
    NOT_BEGUN,
    PROGRESS_BYTES,
    READY,
    SCRIPT,
    RegexRequest,
    SearchReply,
)

if TYPE_CHECKING:
    from asyncio import AbstractEventLoop, Future

_T = TypeVar("_T")

START_TIMEOUT_S = 30.0
"""How long a new helper may take to start before it counts as dead."""


@dataclass(frozen=True)
class RegexOutcome:
    """What came of searching one text for a list of patterns.

    One of: a finished search (``unmatched`` lists the patterns that did not
    match, maybe none), a search over its time limit (``timed_out``), or a
    search that could not be made (``error``).
    """

    unmatched: list[int] = field(default_factory=list)
    """Indexes of the patterns ``re.search`` found nowhere in the text, in order."""
    timed_out: bool = False
    """Whether the time limit ran out before the search ended."""
    timed_out_on: int | None = None
    """Index of the pattern being searched then; ``None`` if none had begun."""
    error: str | None = None
    """Why the search could not be made (a helper that died twice, a closed pool)."""


def _settle(future: Future[_T], value: _T) -> None:
    if not future.done():
        future.set_result(value)


class _Helper:
    """One helper process, the pipe to it, and the page where it notes its current pattern."""

    def __init__(self) -> None:
        self.channel, child_end = Pipe()
        self._progress = tempfile.TemporaryFile()  # noqa: SIM115 (open while the helper lives)
        os.ftruncate(self._progress.fileno(), PROGRESS_BYTES)
        fds = (child_end.fileno(), self._progress.fileno())
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", SCRIPT, *map(str, fds), str(os.getpid())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=fds,
            )
        except BaseException:
            self.forget()
            raise
        finally:
            child_end.close()

    @property
    def pid(self) -> int:
        """The helper's process id."""
        return self.process.pid

    def wait_ready(self) -> None:
        """Wait for the helper's greeting; raise ``EOFError`` if it does not come."""
        if not self.channel.poll(START_TIMEOUT_S):
            raise EOFError(f"the regex helper did not start within {START_TIMEOUT_S:g} s")
        if self.channel.recv() != READY:
            raise EOFError("the regex helper did not greet as expected")

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self.process.poll() is None

    async def ask(
        self, loop: AbstractEventLoop, patterns: RegexRequest, text: str, timeout_s: float
    ) -> SearchReply:
        """The helper's reply to one search; ``TimeoutError`` past ``timeout_s``.

        Raises ``EOFError`` or ``OSError`` when the helper is gone.
        """
        # Until the helper notes its first pattern, the page says "none begun", not the
        # last pattern of its previous search.
        os.pwrite(self._progress.fileno(), NOT_BEGUN.to_bytes(PROGRESS_BYTES, "little"), 0)
        self.channel.send((patterns, text))
        answered = loop.create_future()
        fd = self.channel.fileno()
        loop.add_reader(fd, _settle, answered, True)
        timer = loop.call_later(timeout_s, _settle, answered, False)
        try:
            if not await answered:
                raise TimeoutError
        finally:
            loop.remove_reader(fd)
            timer.cancel()
        reply: SearchReply = self.channel.recv()  # from the helper, which sends nothing else
        return reply

    def current_pattern(self) -> int | None:
        """The index of the pattern the helper began last in this search, if any.

        Meaningful once the helper is stopped; ``None`` when it had not begun one
        (it was still reading a very large request, say).
        """
        noted = int.from_bytes(os.pread(self._progress.fileno(), PROGRESS_BYTES, 0), "little")
        return None if noted == NOT_BEGUN else noted

    def ending(self) -> str:
        """How the process ended, e.g. ``was killed by SIGKILL``, for error messages."""
        code = self.process.poll()
        if code is None:
            return "stopped answering"
        if code < 0:
            try:
                return f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"was killed by signal {-code}"
        return f"exited with status {code}"

    def stop(self, grace_s: float = 0.0) -> None:
        """End the process (``SIGKILL`` unless it exits within ``grace_s``) and reap it."""
        if grace_s > 0:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(grace_s)
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def close(self, grace_s: float = 0.0) -> None:
        """End the process and close the pipe and the progress page."""
        self.stop(grace_s)
        self.forget()

    def forget(self) -> None:
        """Close this process's ends of the pipe and the progress page; the helper lives on."""
        self.channel.close()
        self._progress.close()


class RegexPool:
    """Up to ``size`` helpers, each searching for one caller at a time; see the module.

    Any event loop of the process may search; a search holds one of ``size``
    turns from start to end, so no more than ``size`` helpers ever run.
    """

    def __init__(self, size: int | None = None) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.size = size or cores_per_process()
        # Helpers are started and reaped on threads of the pool's own: the loop's default
        # executor may be busy with other jobs' work, and a time limit must not wait for it.
        self._threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="chalk-regex")
        self._lock = threading.Lock()
        self._turns = self.size
        self._waiting: deque[tuple[AbstractEventLoop, Future[None]]] = deque()
        self._idle: list[_Helper] = []
        self._helpers: set[_Helper] = set()
        self._closed = False

    async def search(self, patterns: RegexRequest, text: str, timeout_s: float) -> RegexOutcome:
        """Search ``text`` for every pattern in a helper, without blocking the event loop.

        The time limit covers the searches of all the patterns together, from
        when the helper has the request; waiting for a free helper is not counted.
        """
        import asyncio  # here, not above: helpers run this file and start faster without it

        loop = asyncio.get_running_loop()
        await self._take_turn(loop)
        try:
            return await self._search(loop, patterns, text, timeout_s)
        finally:
            self._end_turn()

    async def _search(
        self, loop: AbstractEventLoop, patterns: RegexRequest, text: str, timeout_s: float
    ) -> RegexOutcome:
        ending = ""
        for _attempt in range(2):
            helper = await self._checkout(loop)
            if isinstance(helper, str):
                return RegexOutcome(error=helper)
            try:
                reply = await helper.ask(loop, patterns, text, timeout_s)
            except TimeoutError:
                # Killed at once, here on the loop: the kill must not wait for a free thread.
                helper.process.kill()
                return RegexOutcome(timed_out=True, timed_out_on=await self._retire(loop, helper))
            except (EOFError, OSError):
                # A moment for a dying helper to finish dying, so its true end is told.
                await self._retire(loop, helper, grace_s=1.0)
                ending = helper.ending()
                continue
            except BaseException:
                # Cancelled: the helper may still answer, so it cannot serve anyone else.
                self._discard(helper)
                raise
            self._checkin(helper)
            if reply[0] == "error":
                _, index, problem = reply
                return RegexOutcome(
                    error=f"searching for the pattern {patterns[index][0]!r} failed: {problem}"
                )
            return RegexOutcome(unmatched=list(reply[1]))
        return RegexOutcome(
            error=(
                f"the regex helper process died twice during the search (the second one {ending},"
                " perhaps by the out-of-memory killer); the job was not scored: check the memory"
                " of the worker's machine and the worker's log"
            )
        )

    async def _checkout(self, loop: AbstractEventLoop) -> _Helper | str:
        """An idle live helper, else a new one; or why there is none."""
        while True:
            with self._lock:
                if self._closed:
                    return "the regex helper pool was closed during the search"
                while self._idle:
                    helper = self._idle.pop()
                    if helper.alive():
                        return helper
                    self._helpers.discard(helper)
                    helper.close()  # died while idle (it is reaped already)
            try:
                # Starting a process can take a while: not on the event loop.
                await loop.run_in_executor(self._threads, self._start_helper)
            except (EOFError, OSError) as exc:
                return f"a regex helper process could not be started: {exc}"

    def _start_helper(self) -> None:
        """Start a helper and make it idle (the caller takes it, or another one)."""
        helper = _Helper()
        try:
            helper.wait_ready()
        except BaseException:
            helper.close()
            raise
        with self._lock:
            if not self._closed:
                self._helpers.add(helper)
                self._idle.append(helper)
                return
        helper.close()

    async def _retire(
        self, loop: AbstractEventLoop, helper: _Helper, grace_s: float = 0.0
    ) -> int | None:
        """Stop a helper that must not serve again (off the event loop); the pattern it was on."""
        with self._lock:
            self._helpers.discard(helper)
        try:
            try:
                await loop.run_in_executor(self._threads, helper.stop, grace_s)
            except RuntimeError:  # the pool was closed: its threads are gone, and so is it
                helper.stop()
            return helper.current_pattern()
        finally:
            helper.forget()

    def _checkin(self, helper: _Helper) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(helper)
                return
            self._helpers.discard(helper)
        helper.close()

    def _discard(self, helper: _Helper) -> None:
        with self._lock:
            self._helpers.discard(helper)
        helper.close()

    async def _take_turn(self, loop: AbstractEventLoop) -> None:
        with self._lock:
            if self._turns > 0 and not self._waiting:
                self._turns -= 1
                return
            turn = loop.create_future()
            self._waiting.append((loop, turn))
        try:
            await turn
        except BaseException:
            with self._lock:
                given = (loop, turn) not in self._waiting
                if not given:
                    self._waiting.remove((loop, turn))
            if given:  # handed to us as we were cancelled: pass it on
                self._end_turn()
            raise

    def _end_turn(self) -> None:
        with self._lock:
            if not self._waiting:
                self._turns += 1
                return
            loop, turn = self._waiting.popleft()
        # If that loop has closed, its search was cancelled and passes the turn on itself.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, turn, None)

    def pids(self) -> list[int]:
        """The process ids of the helpers now running, idle or busy."""
        with self._lock:
            return [helper.pid for helper in self._helpers]

    def close(self) -> None:
        """Kill every helper; a search still running ends with an error."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            busy = self._helpers.difference(idle)
            self._helpers = set()
        for helper in idle:
            helper.close()
        for helper in busy:
            helper.process.kill()  # its search sees the pipe close, and reaps it
        self._threads.shutdown(wait=False)

    def forget(self) -> None:
        """In a forked child: drop the parent's pool, closing its pipes but sparing its helpers."""
        self._closed = True
        for helper in list(self._helpers):
            helper.forget()


_pool: tuple[int, RegexPool] | None = None
_pool_lock = threading.Lock()
_hooks_registered = False


def regex_pool() -> RegexPool:
    """This process's pool, made on first use (and again in a forked child)."""
    global _pool, _hooks_registered
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), RegexPool())
            if not _hooks_registered:
                _hooks_registered = True
                atexit.register(close_regex_pool)
                os.register_at_fork(after_in_child=_forget_after_fork)
        return _pool[1]


def close_regex_pool() -> None:
    """Kill this process's helpers; the next search starts a fresh pool."""
    global _pool
    with _pool_lock:
        current, _pool = _pool, None
    if current is not None and current[0] == os.getpid():
        current[1].close()


def _forget_after_fork() -> None:
    # The child must not keep the parent's pipes open: a helper learns that the
    # worker is gone when the last copy of its pipe closes. The lock may have been
    # held by a thread that does not exist in the child.
    global _pool, _pool_lock
    _pool_lock = threading.Lock()
    if _pool is not None:
        _pool[1].forget()
        _pool = None
