"""The Linux calls the sandbox makes that Python's ``os`` module does not offer.

Mount API calls (``open_tree``, ``move_mount``, ``mount_setattr``, Linux 5.12+),
namespaces (``unshare``), ``close_range``,
capabilities and ``prctl``, through ``ctypes``. Standard library only: the fork
server loads this file by its path, without the ``chalk_worker`` package (whose
imports a sandboxed interpreter must not carry).
"""

from __future__ import annotations

import ctypes
import os

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

# Numbers of the calls added after 4.x are the same on every architecture.
_OPEN_TREE, _MOVE_MOUNT, _CLOSE_RANGE, _MOUNT_SETATTR = 428, 429, 436, 442
_MACHINE = os.uname().machine
_KEYCTL = {"x86_64": 250, "aarch64": 219}.get(_MACHINE)

AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000
AT_RECURSIVE = 0x8000
OPEN_TREE_CLONE = 1
MOVE_MOUNT_F_EMPTY_PATH = 0x4
CLOSE_RANGE_CLOEXEC = 0x4

MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 2

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWIPC = 0x08000000

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4

CAP_KILL = 5
CAP_SETGID = 6
CAP_SETUID = 7
CAP_SYS_CHROOT = 18
CAP_SYS_ADMIN = 21
CAP_SYS_RESOURCE = 24

KEYCTL_CLEAR = 7
KEY_SPEC_USER_KEYRING = -4
KEY_SPEC_USER_SESSION_KEYRING = -5


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _syscall(number: int, *args: object) -> int:
    """``syscall(2)`` with every integer passed as a C ``long``.

    ``syscall`` is variadic: a Python ``int`` would go as a 32-bit ``int`` and
    leave the upper half of a 64-bit argument undefined (a ``size_t``, flags).
    """
    converted = [ctypes.c_long(arg) if isinstance(arg, int) else arg for arg in args]
    return int(_libc.syscall(ctypes.c_long(number), *converted))


def current_cpu() -> int:
    """The CPU this thread runs on now."""
    return _check(_libc.sched_getcpu(), "sched_getcpu")


def _check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


def open_tree_clone(path: str) -> int:
    """A detached copy of the mount tree at ``path`` (a file descriptor), for ``attach``."""
    flags = OPEN_TREE_CLONE | os.O_CLOEXEC | AT_RECURSIVE
    return _check(_syscall(_OPEN_TREE, AT_FDCWD, path.encode(), flags), f"open_tree {path}")


def restrict_mount(fd: int, readonly: bool) -> None:
    """Make the detached tree ``fd`` nosuid and nodev, and read-only if asked."""
    flags = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (MOUNT_ATTR_RDONLY if readonly else 0)
    attr = _MountAttr(flags, 0, 0, 0)
    _check(
        _syscall(
            _MOUNT_SETATTR,
            fd,
            b"",
            AT_EMPTY_PATH | AT_RECURSIVE,
            ctypes.byref(attr),
            ctypes.sizeof(attr),
        ),
        "mount_setattr",
    )


def attach(fd: int, target: str) -> None:
    """Mount the detached tree ``fd`` (from ``open_tree_clone``) at ``target``."""
    _check(
        _syscall(_MOVE_MOUNT, fd, b"", AT_FDCWD, target.encode(), MOVE_MOUNT_F_EMPTY_PATH),
        f"move_mount to {target}",
    )


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    """``mount(2)``."""
    _check(
        _libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            flags,
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


def detach(target: str) -> None:
    """Unmount ``target`` and every mount below it, lazily (``MNT_DETACH``)."""
    _check(_libc.umount2(target.encode(), MNT_DETACH), f"umount {target}")


def unshare(flags: int) -> None:
    """``unshare(2)``: new namespaces for this process."""
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def cloexec_from(first: int) -> None:
    """Mark every descriptor from ``first`` up close-on-exec (``close_range``)."""
    _check(_syscall(_CLOSE_RANGE, first, 0xFFFFFFFF, CLOSE_RANGE_CLOEXEC), "close_range")


def prctl(option: int, value: int) -> None:
    """``prctl(option, value, 0, 0, 0)``."""
    long = ctypes.c_ulong
    _check(_libc.prctl(option, long(value), long(0), long(0), long(0)), f"prctl {option}")


def _permitted() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapPrm:"):
                return int(line.split()[1], 16)
    return 0


def keep_capabilities(keep: tuple[int, ...]) -> None:
    """Drop every capability but those of ``keep`` this process has; empty the other sets.

    The bounding set is emptied first (this process never executes a program
    with its privileges), inheritable and ambient sets are cleared, so no
    program started later can gain a capability back.
    """
    permitted = _permitted()
    cap = 0
    long = ctypes.c_ulong
    while _libc.prctl(PR_CAPBSET_DROP, long(cap), long(0), long(0), long(0)) == 0:
        cap += 1
    _libc.prctl(PR_CAP_AMBIENT, long(PR_CAP_AMBIENT_CLEAR_ALL), long(0), long(0), long(0))
    masks = [0, 0]
    for number in keep:
        if permitted >> number & 1:
            masks[number // 32] |= 1 << (number % 32)
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)(*(_CapData(mask, mask, 0) for mask in masks))
    _check(_libc.capset(ctypes.byref(header), data), "capset")


def clear_user_keyring() -> None:
    """Empty the calling uid's kernel keyrings (user and user-session), which outlive
    its processes.

    Scripts of one sandbox slot share a uid; without this a run could leave a
    key there for the next one to read. Failing (no keyring support) is harmless.
    """
    if _KEYCTL is not None:
        _syscall(_KEYCTL, KEYCTL_CLEAR, KEY_SPEC_USER_KEYRING)
        _syscall(_KEYCTL, KEYCTL_CLEAR, KEY_SPEC_USER_SESSION_KEYRING)
