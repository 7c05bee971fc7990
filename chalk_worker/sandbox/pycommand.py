"""Which ``{python}`` commands can run warm: the command as data, and the checks on it.

``parse_python_command`` reads ``python -c CODE``, ``python -m MODULE`` and
``python SCRIPT`` into a ``PythonCommand`` (anything else runs cold); the
worker sends it to the fork server as JSON. There, in the run's own process
and as the slot's user, the command still runs cold when ``read_script``
refuses the script (a zip archive, compiled code, not a regular file), or
when ``shadowed_module`` finds a module the server imported in the first
``sys.path`` entry (``first_path_entry``): ``json.py`` beside a script would
be imported by the cold interpreter, not the preloaded one. ``pymain`` runs
the others.

Standard library only: the fork server loads this file by path.
"""

import importlib.util
import os
import stat
from typing import Literal, TypedDict

MAX_ARGUMENT_BYTES = 128 * 1024
"""Longest single argument ``execve`` takes (``MAX_ARG_STRLEN``); longer ones run cold."""

CommandKind = Literal["code", "module", "script"]
"""How the program is given: ``-c CODE``, ``-m MODULE`` or a script's path."""
COMMAND_KINDS: tuple[CommandKind, ...] = ("code", "module", "script")


class CommandData(TypedDict):
    """A ``PythonCommand`` as JSON (in a run request)."""

    kind: CommandKind
    target: str
    args: list[str]


class PythonCommand:
    """A ``{python}`` command the warm path can run: ``-c``, ``-m`` or a script, and its args."""

    def __init__(self, kind: CommandKind, target: str, args: list[str]) -> None:
        self.kind = kind
        """``code``, ``module`` or ``script``."""
        self.target = target
        """The code, the module's name or the script's path."""
        self.args = args
        """The arguments after it (``sys.argv[1:]``)."""

    def to_json(self) -> CommandData:
        """The command as JSON-ready data, for the fork server."""
        return {"kind": self.kind, "target": self.target, "args": self.args}

    @classmethod
    def from_json(cls, data: CommandData) -> "PythonCommand":
        """The command from ``to_json``'s data (``ValueError`` for a kind it never gives)."""
        kind = next((known for known in COMMAND_KINDS if known == data["kind"]), None)
        if kind is None:
            raise ValueError(
                f"unknown kind of Python command {data['kind']!r:.100}: "
                f"one of {', '.join(COMMAND_KINDS)}"
            )
        return cls(kind, str(data["target"]), [str(a) for a in data["args"]])


def parse_python_command(argv: list[str]) -> PythonCommand | None:
    """The warm form of ``argv`` (``[python, ...]``), or ``None`` if it must run cold.

    Only ``-c CODE``, ``-m MODULE`` and ``SCRIPT``, each with any arguments, are
    warm. Options (``-u``, ``-X dev``, ``-I``...), reading the program from
    stdin, and arguments ``execve`` would refuse (a NUL byte, text that is not
    a file name, one longer than 128 KiB) run cold, which behaves as before.
    """
    if len(argv) < 2:
        return None
    for word in argv:
        try:
            encoded = os.fsencode(word)
        except UnicodeError:
            return None
        if b"\0" in encoded or len(encoded) >= MAX_ARGUMENT_BYTES:
            return None
    first = argv[1]
    if first in ("-c", "-m"):
        if len(argv) < 3 or (first == "-m" and not argv[2]):
            return None
        return PythonCommand("code" if first == "-c" else "module", argv[2], argv[3:])
    if first.startswith("-") or not first:
        return None
    return PythonCommand("script", first, argv[2:])


def first_path_entry(command: PythonCommand) -> str:
    """``sys.path[0]`` of the cold interpreter (call in the run's working folder)."""
    if command.kind == "code":
        return ""
    if command.kind == "module":
        return os.getcwd()
    return os.path.dirname(os.path.realpath(command.target))


def _zip_or_compiled(source: bytes, path: str) -> bool:
    """Whether the interpreter would run ``source`` as a zip application or as bytecode."""
    return (
        path.endswith(".pyc")
        or source[:2] == importlib.util.MAGIC_NUMBER[:2]
        or source.startswith(b"PK\x03\x04")
        or b"PK\x05\x06" in source[-65557:]  # a zip's end record: an archive after a prefix
    )


def read_script(path: str) -> bytes | str:
    """The script's bytes, or why the warm path cannot run it (the cold one will say more)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return f"cannot open the script: {exc.strerror}"
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            return "the script is not a regular file"
        source = handle.read()
    if _zip_or_compiled(source, path):
        return "the script is a zip archive or compiled code"
    return source


def shadowed_module(folder: str, preloaded: frozenset[str]) -> str | None:
    """A module the server imported that ``folder`` (first on ``sys.path``) would replace.

    Any entry named like one of them (``json.py``, ``json/``, ``json.so``...)
    counts, whether or not the cold interpreter would really pick it: when in
    doubt, the command runs cold.
    """
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return None  # the import system cannot list it either: nothing there is found
    for name in names:
        if name.partition(".")[0] in preloaded:
            return name
    return None
