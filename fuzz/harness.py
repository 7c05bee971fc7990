"""Running a fuzz target under atheris (libFuzzer): its flags, its corpus, its instrumentation.

``python -m fuzz.NAME [FLAG...] [CORPUS_FOLDER_OR_INPUT_FILE...]`` runs the target
``NAME``; every argument goes to libFuzzer (``-help=1`` lists its flags). With no
folder or file named, new interesting inputs go to ``chalk-fuzz-NAME`` in the
system's temporary folder (kept, so the next run goes on from there) and the
committed corpus ``fuzz/corpus/NAME/`` is read as seeds, never written. A target
fails the run on an exception its contract does not allow, a ``ContractBroken``,
a hang (``-timeout``) or a blown memory cap (``-rss_limit_mb``); libFuzzer then
writes the input to ``crash-...`` (or ``timeout-...``, ``oom-...``) under
``-artifact_prefix``.

Only the project's code (and what a target names, such as the standard library's
regular expression parser) is instrumented for coverage: pydantic-core, zlib and
``re``'s matcher are compiled code that atheris cannot see into.
"""

from __future__ import annotations

import contextlib
import enum
import gc
import io
import sys
import tempfile
import types
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "corpus"
"""The committed corpora, one folder per target: seeds and inputs that once failed."""
DICTIONARIES = Path(__file__).resolve().parent / "dictionaries"
"""libFuzzer dictionaries (``NAME.dict``): tokens worth inserting into a target's inputs."""
PROJECT = ("chalk_client", "chalk_worker")
"""The packages every target instruments."""

_USAGE = """\
usage: python -m fuzz.{name} [FLAG...] [CORPUS_FOLDER_OR_INPUT_FILE...]

{doc}
Every argument goes to libFuzzer (python -m fuzz.{name} -help=1 lists all its flags).
With no folder or file, new inputs go to {scratch} and
fuzz/corpus/{name}/ is read as seeds. Defaults here: {defaults}.
Flags used most:
  -max_total_time=N     stop after N seconds
  -runs=N               stop after N inputs (-runs=0 with files: run just those)
  -timeout=N            an input taking more than N seconds is a hang
  -max_len=N            the longest input to try
  -artifact_prefix=DIR/ where crash-*, timeout-* and oom-* files are written
  -merge=1 DEST SRC...  add to DEST the inputs of SRC that reach new code
  -print_final_stats=1  print the run's statistics at the end
"""


class ContractBroken(Exception):
    """Raised by a target when the code it feeds answered an input as its contract forbids."""


class Unread(enum.Enum):
    """What a target's reader gives for an input it does not take at all (not UTF-8, say)."""

    INPUT = "input"


@contextlib.contextmanager
def quiet(what: str) -> Iterator[None]:
    """Raise ``ContractBroken`` if the block prints anything or warns.

    Except ``re``'s warnings about a pattern's own syntax, which tell its author that
    a later Python reads it otherwise ("Possible nested set...") or refuses it ("bad
    character in group name..."): the pattern is the input, not the code's doing.
    """
    printed = io.StringIO()
    with warnings.catch_warnings(record=True) as warned, contextlib.redirect_stdout(printed):
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", "Possible ", FutureWarning)
        warnings.filterwarnings("ignore", "bad character in group name", DeprecationWarning)
        yield
    if printed.getvalue() or warned:
        said = [str(w.message) for w in warned]
        raise ContractBroken(f"{what} printed {printed.getvalue()!r:.300} and warned {said}")


@dataclass(frozen=True)
class Target:
    """One fuzz target: the check that feeds it an input, and how to run it."""

    name: str
    """The module's last name, and the name of its corpus folder."""
    check: Callable[[bytes], None]
    """Feeds one input to the code under test; raises when the outcome breaks its contract."""
    doc: str
    """What the target feeds and asserts, for ``--help``."""
    flags: tuple[str, ...] = ()
    """libFuzzer flags for this target (``-max_len=...``); the command line overrides them."""
    instrument: tuple[str, ...] = PROJECT
    """Packages or modules whose Python functions report coverage."""

    @property
    def corpus(self) -> Path:
        """The committed corpus folder."""
        return CORPUS / self.name

    @property
    def scratch(self) -> Path:
        """Where new inputs go when the command line names no corpus folder."""
        return Path(tempfile.gettempdir()) / f"chalk-fuzz-{self.name}"

    def default_flags(self) -> tuple[str, ...]:
        """The flags given before the command line's (a later flag wins in libFuzzer)."""
        dictionary = DICTIONARIES / f"{self.name}.dict"
        given = (f"-dict={dictionary}",) if dictionary.is_file() else ()
        return ("-timeout=20", *given, *self.flags)

    @staticmethod
    def names_no_folder(args: Sequence[str]) -> bool:
        """Whether the command line names no corpus folder or input (only flags)."""
        return all(arg.startswith("-") for arg in args)

    def libfuzzer_argv(self, args: Sequence[str]) -> list[str]:
        """The argument vector handed to libFuzzer for the command line ``args``."""
        argv = [f"fuzz.{self.name}", *self.default_flags(), *args]
        if self.names_no_folder(args):
            argv += [str(self.scratch), str(self.corpus)]
        return argv


def _inside(module: object, names: tuple[str, ...]) -> bool:
    return isinstance(module, str) and any(
        module == name or module.startswith(f"{name}.") for name in names
    )


def instrument(names: tuple[str, ...]) -> contextlib.ExitStack:
    """Add coverage to every function of ``names`` loaded now, and of those imported later.

    Returns the stack that holds the import hook (closing it stops instrumenting imports).
    """
    import atheris  # only where fuzzing: the corpus tests run the checks without it

    for thing in gc.get_objects():
        if isinstance(thing, types.FunctionType) and _inside(thing.__module__, names):
            atheris.instrument_func(thing)
    stack = contextlib.ExitStack()
    stack.enter_context(atheris.instrument_imports(include=list(names)))
    return stack


def main(target: Target, args: Sequence[str] | None = None) -> None:
    """Fuzz ``target`` with the command line ``args`` (default: ``sys.argv[1:]``); never returns."""
    args = list(sys.argv[1:] if args is None else args)
    if any(arg in ("-h", "--help") for arg in args):
        print(
            _USAGE.format(
                name=target.name,
                doc=target.doc,
                scratch=target.scratch,
                defaults=" ".join(target.default_flags()),
            )
        )
        raise SystemExit(0)
    import atheris

    if target.names_no_folder(args):
        target.scratch.mkdir(exist_ok=True)
    hook = instrument(target.instrument)
    atheris.Setup(target.libfuzzer_argv(args), target.check)
    with hook:
        atheris.Fuzz()
