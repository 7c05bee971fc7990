"""The fork server's socket protocol: a JSON message, and descriptors beside it.

``send`` and ``receive`` carry one message on a ``SOCK_SEQPACKET`` socket with
its descriptors (``SCM_RIGHTS``); ``read_all`` reads a pipe to its end. Standard
library only: the server and its spares load this file by path.
"""

import array
import json
import os
import socket
from typing import Any

MAX_FDS = 64
"""Descriptors one run request may carry."""


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
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
