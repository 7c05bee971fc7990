"""A slow, lossy Ethernet link in user space, between two network namespaces.

For kernels without ``tc netem``: this process opens a TAP device in each of two
namespaces and copies every frame from one to the other, late by a delay with
jitter (frames stay in order) and dropped at a given rate, each direction on its
own. Loss is real packet loss: TCP on either side sees it and retransmits.

    python -m chalk_worker.testing.link /run/netns/A DEV_A /run/netns/B DEV_B \\
        --delay-ms 100 --jitter-ms 30 --loss 0.03 [--both-ways]

The devices must exist already (``ip -n NETNS tuntap add dev DEV mode tap``);
``--both-ways`` slows frames from B to A as well (by default only A to B is
slowed, as ``netem`` on A's interface would). Runs until SIGTERM or SIGINT.
Linux only, as root (it enters namespaces with ``setns``).
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import os
import random
import signal
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass

TUNSETIFF = 0x400454CA
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
CLONE_NEWNET = 0x40000000
MAX_FRAME = 65_536


@dataclass(frozen=True)
class Impairment:
    """What the link does to the frames of one direction."""

    delay_s: float = 0.0
    jitter_s: float = 0.0
    loss: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.loss <= 1.0:
            raise ValueError(f"loss is a fraction between 0 and 1, not {self.loss}")
        if self.delay_s < 0 or self.jitter_s < 0 or self.jitter_s > self.delay_s:
            raise ValueError("delay and jitter are >= 0, and the jitter at most the delay")


def _setns(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns {path}: {os.strerror(err)}")
    finally:
        os.close(fd)


def open_tap(netns: str, device: str) -> int:
    """A file descriptor of the TAP ``device`` in the namespace of the file ``netns``."""
    _setns(netns)
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", device.encode(), IFF_TAP | IFF_NO_PI))
    return fd


class Direction:
    """Frames read from one TAP, written to the other once their time has come."""

    def __init__(self, source: int, sink: int, impairment: Impairment, seed: int) -> None:
        self.source = source
        self.sink = sink
        self.impairment = impairment
        self.random = random.Random(seed)
        self.frames: deque[tuple[float, bytes]] = deque()
        self.ready = threading.Condition()
        self.last_release = 0.0
        self.passed = self.dropped = 0

    def read(self) -> None:
        """Read frames for ever: drop some, schedule the rest (never before an earlier one)."""
        shape = self.impairment
        while True:
            frame = os.read(self.source, MAX_FRAME)
            if shape.loss and self.random.random() < shape.loss:
                self.dropped += 1
                continue
            delay = shape.delay_s + self.random.uniform(-shape.jitter_s, shape.jitter_s)
            release = max(time.monotonic() + delay, self.last_release)
            self.last_release = release
            with self.ready:
                self.frames.append((release, frame))
                self.ready.notify()

    def write(self) -> None:
        """Write each scheduled frame at its time; a frame the far side refuses is lost."""
        while True:
            with self.ready:
                while not self.frames:
                    self.ready.wait()
                release, frame = self.frames.popleft()
            wait = release - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                os.write(self.sink, frame)
                self.passed += 1
            except OSError:  # the far side's device is down: the frame is lost
                self.dropped += 1


def run(a: int, b: int, a_to_b: Impairment, b_to_a: Impairment, seed: int = 0) -> None:
    """Copy frames both ways between TAP descriptors ``a`` and ``b`` until signalled."""
    directions = [Direction(a, b, a_to_b, seed), Direction(b, a, b_to_a, seed + 1)]
    for direction in directions:
        for target in (direction.read, direction.write):
            threading.Thread(target=target, daemon=True).start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("netns_a")
    parser.add_argument("dev_a")
    parser.add_argument("netns_b")
    parser.add_argument("dev_b")
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--jitter-ms", type=float, default=0.0)
    parser.add_argument("--loss", type=float, default=0.0, help="fraction of frames dropped")
    parser.add_argument("--both-ways", action="store_true", help="slow B to A as well")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    slow = Impairment(args.delay_ms / 1000, args.jitter_ms / 1000, args.loss)
    a = open_tap(args.netns_a, args.dev_a)
    b = open_tap(args.netns_b, args.dev_b)
    run(a, b, slow, slow if args.both_ways else Impairment(), args.seed)


if __name__ == "__main__":
    main()
