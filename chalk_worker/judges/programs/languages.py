"""The languages a ``tests`` judge runs programs in: how each is built and run.

Each ``LanguageSpec`` names the file the source is written to, the toolchain
programs it needs (found on the system's own ``PATH``, never a user's home:
the sandbox's users cannot reach one), how it compiles (for interpreted
languages, a syntax check: a program that does not parse is a ``CE`` in every
language), how it runs, and what it leaves to keep (the build
cache copies those). Python runs on the worker's own interpreter, which the
warm path can fork instead of starting.

``Toolchains.detect()`` finds which languages this worker can run and their
versions (``chalk health`` shows them; the build cache keys on them).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
"""Where toolchains are looked for: the system's, which the sandbox shows."""

PYTHON_PARSE_ERRORS = ("SyntaxError", "IndentationError", "TabError")
"""What Python says of a source that does not parse: a ``CE``, as for C. It says so as the
program starts, so its first run is its syntax check (one sandboxed run fewer per job)."""

JAVA_OVERHEAD_MB = 192
"""Memory a JVM needs beside its heap (the heap gets the test's whole limit)."""
NODE_OVERHEAD_MB = 64
"""Memory Node needs beside its old space (which gets the test's whole limit)."""


@dataclass(frozen=True)
class LanguageSpec:
    """How one language's programs are built and run.

    In ``compile`` and ``run``, ``{TOOL}`` is the absolute path of a program of
    ``tools``, ``{source}`` the source's file (its name to compile, its path in
    the build to run), ``{build}`` the folder of the build, ``{main}`` Java's
    main class, ``{memory_mb}`` the test's memory limit.
    """

    name: str
    source_name: str
    """The source's file name (Java's follows its public class)."""
    tools: tuple[str, ...]
    """Programs the toolchain needs, looked for on ``SYSTEM_PATH``."""
    run: tuple[str, ...]
    compile: tuple[str, ...] | None = None
    """The build; for interpreted languages a syntax check, the source being what is kept."""
    outputs: tuple[str, ...] = ()
    """What a build leaves in the working folder to keep (files or folders)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Variables the compile and the runs get, ``{home}`` being the working folder."""
    memory_overhead_mb: int = 0
    """Memory the runtime needs beside what the flags give the program."""
    out_of_memory: str | None = None
    """Text of the runtime's own out-of-memory error on stderr (an ``MLE``, not an ``RE``)."""
    version_args: tuple[str, ...] = ("--version",)
    extensions: tuple[str, ...] = ()
    """File extensions that mean this language (``language: auto`` on a file)."""
    parse_errors: tuple[str, ...] = ()
    """For a language checked as it starts (no ``compile``): the errors its runtime reports,
    before running anything, for a source that does not parse."""


LANGUAGES: dict[str, LanguageSpec] = {
    spec.name: spec
    for spec in (
        LanguageSpec(
            name="python",
            source_name="main.py",
            tools=(),
            run=("{python}", "{source}"),
            out_of_memory="MemoryError",
            extensions=(".py",),
            parse_errors=PYTHON_PARSE_ERRORS,
        ),
        LanguageSpec(
            name="c",
            source_name="main.c",
            tools=("gcc",),
            compile=("{gcc}", "-std=gnu17", "-O2", "-pipe", "-o", "main", "{source}", "-lm"),
            run=("{build}/main",),
            outputs=("main",),
            extensions=(".c",),
        ),
        LanguageSpec(
            name="cpp",
            source_name="main.cpp",
            tools=("g++",),
            compile=("{g++}", "-std=gnu++17", "-O2", "-pipe", "-o", "main", "{source}"),
            run=("{build}/main",),
            outputs=("main",),
            extensions=(".cpp", ".cc", ".cxx", ".c++"),
        ),
        LanguageSpec(
            name="java",
            source_name="Main.java",
            tools=("javac", "java"),
            compile=(
                "{javac}",
                "-J-XX:+UseSerialGC",
                "-J-XX:TieredStopAtLevel=1",
                "-J-XX:-UsePerfData",
                "-encoding",
                "UTF-8",
                "-d",
                "classes",
                "{source}",
            ),
            run=(
                "{java}",
                "-Xmx{memory_mb}m",
                "-Xss64m",
                "-XX:+UseSerialGC",
                "-XX:-UsePerfData",
                "-cp",
                "{build}/classes",
                "{main}",
            ),
            outputs=("classes",),
            memory_overhead_mb=JAVA_OVERHEAD_MB,
            out_of_memory="java.lang.OutOfMemoryError",
            version_args=("-version",),
            extensions=(".java",),
        ),
        LanguageSpec(
            name="go",
            source_name="main.go",
            tools=("go",),
            compile=("{go}", "build", "-o", "main", "{source}"),
            run=("{build}/main",),
            outputs=("main",),
            # A build cache of the job's own: one job's build never feeds another's.
            env={
                "GOCACHE": "{home}/.cache/go-build",
                "GOPATH": "{home}/go",
                "GO111MODULE": "off",
                "GOTOOLCHAIN": "local",
                "GOFLAGS": "",
                "CGO_ENABLED": "0",
            },
            version_args=("version",),
            extensions=(".go",),
        ),
        LanguageSpec(
            name="rust",
            source_name="main.rs",
            tools=("rustc",),
            compile=("{rustc}", "--edition=2021", "-O", "-o", "main", "{source}"),
            run=("{build}/main",),
            outputs=("main",),
            extensions=(".rs",),
        ),
        LanguageSpec(
            name="javascript",
            source_name="main.js",
            tools=("node",),
            compile=("{node}", "--check", "{source}"),
            run=("{node}", "--max-old-space-size={memory_mb}", "{source}"),
            outputs=("main.js",),
            memory_overhead_mb=NODE_OVERHEAD_MB,
            out_of_memory="JavaScript heap out of memory",
            extensions=(".js", ".mjs", ".cjs"),
        ),
        LanguageSpec(
            name="bash",
            source_name="main.sh",
            tools=("bash",),
            compile=("{bash}", "-n", "{source}"),
            run=("{bash}", "{source}"),
            outputs=("main.sh",),
            extensions=(".sh", ".bash"),
        ),
    )
}
"""Every language, by name."""


def language_of_file(name: str) -> str | None:
    """The language a file's extension means, or ``None``."""
    lowered = name.lower()
    for spec in LANGUAGES.values():
        if any(lowered.endswith(extension) for extension in spec.extensions):
            return spec.name
    return None


_JAVA_PUBLIC = re.compile(r"\bpublic\s+(?:(?:final|abstract|static)\s+)*class\s+(\w+)")
_JAVA_CLASS = re.compile(r"\bclass\s+(\w+)")
_JAVA_MAIN = re.compile(r"\bstatic\s+void\s+main\s*\(")


_JAVA_NOT_CODE = re.compile(
    r'//[^\n]*|/\*.*?\*/|"""(?:\\.|[^\\])*?"""|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
    re.DOTALL,
)
"""Comments, text blocks, strings and characters: no class is declared in them."""


def java_main_class(source: str) -> str:
    """The class a Java program's file must be named after and run as.

    Its public class if it has one (javac wants the file named so); else the
    last class declared before ``static void main``; else ``Main``. Comments
    and strings are left out of the search.
    """
    source = _JAVA_NOT_CODE.sub(" ", source)
    public = _JAVA_PUBLIC.search(source)
    if public:
        return public.group(1)
    main = _JAVA_MAIN.search(source)
    if main:
        declared = _JAVA_CLASS.findall(source[: main.start()])
        if declared:
            return str(declared[-1])
    return "Main"


@dataclass(frozen=True)
class Toolchain:
    """One language as this worker can run it: its programs' paths, and its version."""

    spec: LanguageSpec
    paths: Mapping[str, str]
    """Each tool's absolute path (and ``python``: the worker's interpreter)."""
    version: str
    """The toolchain's own words for its version (first line)."""


@dataclass
class Toolchains:
    """The languages this worker can run (``found``) and why the others are missing."""

    found: dict[str, Toolchain]
    missing: dict[str, str]
    """Each language this worker cannot run, and what it lacks."""

    @classmethod
    def detect(cls) -> Toolchains:
        """Look for every language's programs and ask each for its version."""
        found: dict[str, Toolchain] = {}
        missing: dict[str, str] = {}
        for spec in LANGUAGES.values():
            paths = {tool: shutil.which(tool, path=SYSTEM_PATH) for tool in spec.tools}
            absent = [tool for tool, path in paths.items() if path is None]
            if absent:
                missing[spec.name] = (
                    f"{', '.join(absent)} not found on {SYSTEM_PATH}: install it "
                    f"(Debian: {_DEBIAN_PACKAGES[spec.name]})"
                )
                continue
            resolved = {tool: str(path) for tool, path in paths.items() if path is not None}
            if spec.name == "python":
                resolved["python"] = sys.executable
                version = f"Python {sys.version.split()[0]}"
            else:
                version = _version(resolved[spec.tools[0]], spec.version_args)
            found[spec.name] = Toolchain(spec, resolved, version)
        return cls(found, missing)

    def report(self) -> dict[str, str]:
        """Each language and its version, or ``missing: why``."""
        return {
            name: (
                self.found[name].version if name in self.found else f"missing: {self.missing[name]}"
            )
            for name in LANGUAGES
        }


_DEBIAN_PACKAGES = {
    "python": "python3",
    "c": "gcc",
    "cpp": "g++",
    "java": "openjdk-17-jdk-headless",
    "go": "golang-go",
    "rust": "rustc",
    "javascript": "nodejs",
    "bash": "bash",
}


def _version(program: str, args: tuple[str, ...]) -> str:
    """The first line a toolchain prints of its version (``java -version`` uses stderr)."""
    try:
        done = subprocess.run(
            [program, *args], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({exc})"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0].strip() if lines else "unknown"


_detected: Toolchains | None = None
_detect_lock = threading.Lock()


def toolchains() -> Toolchains:
    """This worker's toolchains, found once per process."""
    global _detected
    with _detect_lock:
        if _detected is None:
            _detected = Toolchains.detect()
        return _detected
