"""The fork server's socket protocol: a JSON message, and descriptors beside it.

``send`` and ``receive`` carry one message on a ``SOCK_SEQPACKET`` socket with
its descriptors (``SCM_RIGHTS``); ``read_all`` reads a pipe to its end. The
messages the worker sends are ``ServerSetup`` (once, at the server's start) and
``RunRequest`` (per run); the view a setup carries is read with ``parse_view``.
Standard library only: the server and its spares load this file by path.
"""

import array
import json
import os
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal, TypedDict

if TYPE_CHECKING:
    from chalk_worker.sandbox.pycommand import CommandData

MAX_FDS = 64
"""Descriptors one run request may carry."""

ViewKind = Literal["symlink", "dir", "ro", "rw", "proc", "dev", "tmpfs"]
"""What one step of building a sandbox's root makes (see ``ViewEntry``)."""
VIEW_KINDS: tuple[ViewKind, ...] = ("symlink", "dir", "ro", "rw", "proc", "dev", "tmpfs")

ViewEntry = tuple[ViewKind, str, str]
"""One step of building a sandbox's root: ``(kind, path, detail)``.

Kinds: ``symlink`` (``detail`` is the link's text), ``dir`` (a folder, mode 0755),
``ro`` / ``rw`` (the host's ``path`` bound read-only / writable), ``proc``, ``dev``,
``tmpfs`` (``detail`` is its size in bytes).
"""


class ServerSetup(TypedDict):
    """What the worker tells a fork server as it starts."""

    view: list[list[str]]
    """The runs' view, ``ViewEntry`` items as JSON lists (``parse_view`` reads them)."""
    preload: list[str]
    """Modules a warm server imports."""
    warm: bool
    """Whether it runs ``{python}`` commands in forks of its own interpreter."""


class RunRequest(TypedDict):
    """One run, as the worker sends it to a server's spare (pairs and triples arrive as
    JSON lists, which unpack alike)."""

    argv: list[str]
    env: list[tuple[str, str]]
    cwd: str
    umask: int
    uid: int
    gid: int
    rlimits: list[tuple[int, int, int]]
    """``(resource, soft, hard)`` per limit."""
    tmp_bytes: int
    mounts: list[str]
    """The run's own paths, in the order of the detached mounts sent with it."""
    hide: str | None
    cgroups: int
    """How many cgroup files were sent (after stdin, if sent)."""
    python: "CommandData | None"
    """The command's warm form, if it has one."""
    stdin: bool
    conceal: list[str]


def parse_view(data: object) -> list[ViewEntry]:
    """The view a ``ServerSetup`` carries, each kind checked (``ValueError`` if unknown)."""
    if not isinstance(data, list):
        raise ValueError(f"a fork server's view is a list, not {type(data).__name__}")
    entries: list[ViewEntry] = []
    for item in data:
        if not (
            isinstance(item, list)
            and len(item) == 3
            and all(isinstance(part, str) for part in item)
        ):
            raise ValueError(f"a view entry is [kind, path, detail], not {item!r:.200}")
        kind = next((known for known in VIEW_KINDS if known == item[0]), None)
        if kind is None:
            raise ValueError(
                f"unknown view entry kind {item[0]!r:.100}: one of {', '.join(VIEW_KINDS)}"
            )
        entries.append((kind, item[1], item[2]))
    return entries


def send(sock: socket.socket, message: Mapping[str, object], fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    if fds:
        sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sock.send(data)


def receive(sock: socket.socket) -> tuple[bytes, list[int]]:
    fds = array.array("i")
    data, ancillary, _, _ = sock.recvmsg(1 << 20, socket.CMSG_SPACE(MAX_FDS * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    return data, list(fds)


def read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)
