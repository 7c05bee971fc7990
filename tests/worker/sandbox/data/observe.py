"""Print, as JSON, what a scoring script can observe of the interpreter it runs in.

Run warm and cold with the same command, in the same sandbox session, the two
printouts must be the same (memory addresses aside).
"""

import json
import locale
import os
import resource
import signal
import site
import socket
import sys
import warnings


def streams() -> list[list[object]]:
    """How the interpreter made its standard streams."""
    return [
        [
            stream.encoding,
            stream.errors,
            stream.line_buffering,
            stream.write_through,  # type: ignore[union-attr]
            stream.buffer.raw.name,  # type: ignore[attr-defined,union-attr]
            stream.mode,
            type(stream).__name__,
            type(stream.buffer).__name__,
        ]
        for stream in (sys.stdin, sys.stdout, sys.stderr)
    ]


def status_lines() -> list[str]:
    """Credentials and capabilities, as the kernel shows them."""
    with open("/proc/self/status") as status:
        prefixes = ("Cap", "NoNewPrivs", "Seccomp", "Groups", "Uid", "Gid")
        return [line.strip() for line in status if line.startswith(prefixes)]


def mounts() -> list[str]:
    """Every mount point and its options."""
    with open("/proc/self/mounts") as table:
        return sorted(" ".join(line.split()[1:4:2]) for line in table)


state = {
    "argv": sys.argv,
    "orig_argv": sys.orig_argv,
    "path": sys.path,
    "cwd": os.getcwd(),
    "env": {k: v for k, v in os.environ.items() if k != "CHALK_SANDBOX_TOKEN"},
    "env_order": list(os.environ),
    "main": {k: repr(v) for k, v in globals().items() if k.startswith("__")},
    "main_keys": list(globals()),
    "stdin": sys.stdin.read(),
    "streams": streams(),
    "flags": repr(sys.flags),
    "ids": [os.getuid(), os.geteuid(), os.getgid(), os.getegid(), os.getgroups()],
    "umask": os.umask(0o22),
    "session": [os.getsid(0), os.getpgid(0)],
    "rlimits": {
        name: resource.getrlimit(getattr(resource, name))
        for name in dir(resource)
        if name.startswith("RLIMIT_")
    },
    "signals": {
        int(number): repr(signal.getsignal(number))
        for number in signal.valid_signals()
        if number not in (signal.SIGKILL, signal.SIGSTOP) and number < 32
    },
    "blocked": sorted(int(n) for n in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    "status": status_lines(),
    "hostname": socket.gethostname(),
    "fds": sorted(os.listdir("/proc/self/fd")),
    "root": sorted(os.listdir("/")),
    "tmp": oct(os.stat("/tmp").st_mode),
    "dev": sorted(os.listdir("/dev")),
    "mounts": mounts(),
    "cgroup": open("/proc/self/cgroup").read(),  # noqa: SIM115
    "warnings": repr(warnings.filters),
    "hooks": [repr(sys.excepthook), repr(sys.displayhook), repr(sys.unraisablehook)],
    "recursion": sys.getrecursionlimit(),
    "switch": sys.getswitchinterval(),
    "executable": [sys.executable, sys.prefix, sys.base_prefix],
    "site": [site.USER_BASE, site.USER_SITE, site.ENABLE_USER_SITE],
    "encodings": [
        sys.getfilesystemencoding(),
        sys.getdefaultencoding(),
        locale.getpreferredencoding(False),
        locale.setlocale(locale.LC_CTYPE),
    ],
    "nice": os.nice(0),
    "affinity": sorted(os.sched_getaffinity(0)),
    "dont_write_bytecode": sys.dont_write_bytecode,
}
print(json.dumps(state, indent=1, sort_keys=True))
