"""Generate the sync client and store from their asyncio sources (as httpx and httpcore do).

    python scripts/unasync.py           # write client.py, handles.py and store.py
    python scripts/unasync.py --check   # exit 1 if they are not what the sources give

The asyncio modules of ``chalk_client`` are the source: ``async_client.py``,
``async_handles.py`` and ``async_store.py``. Each line becomes its sync twin by word
replacements (``AsyncChalkClient`` -> ``ChalkClient``, ``async def`` -> ``def``,
``await`` dropped, ...). A comment line ``# unasync: CODE`` replaces the line
after it with ``CODE`` (same indentation) where no word replacement can.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAIRS = {
    "chalk_client/async_client.py": "chalk_client/client.py",
    "chalk_client/async_store.py": "chalk_client/store.py",
    "chalk_client/async_handles.py": "chalk_client/handles.py",
}
WORDS = {
    "AsyncChalkClient": "ChalkClient",
    "AsyncJobHandle": "JobHandle",
    "AsyncBatch": "Batch",
    "AsyncJobStore": "JobStore",
    "_AsyncCollector": "_Collector",
    "AsyncIterator": "Iterator",
    "__aiter__": "__iter__",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "aclose": "close",
    "async_store": "store",
    "async_handles": "handles",
    "async_client": "client",
    "connect_async": "connect",
    "run_pipeline_async": "run_pipeline",
    "read_workers_async": "read_workers",
    "StopAsyncIteration": "StopIteration",
}
PATTERNS = [
    # The source's note on what is generated from it, and its "in asyncio", are its own.
    (re.compile(r"\n\nThis module is the source of .*?generates from it\.", re.S), ""),
    (re.compile(r", in asyncio\.$", re.M), "."),
    (re.compile(r"\basync (def|for|with)\b"), r"\1"),
    (re.compile(r"\bawait "), ""),
    (re.compile(r"\bredis\.asyncio\b"), "redis"),
    (re.compile(r"\basyncio\.sleep\b"), "time.sleep"),
    (re.compile(r"^import asyncio\n", re.M), ""),
    (re.compile(r"\b(" + "|".join(map(re.escape, WORDS)) + r")\b"), None),
]
DIRECTIVE = re.compile(r"^(\s*)# unasync: (.*)$")


def unasync(source: str, origin: str) -> str:
    """The sync twin of ``source`` (the text of ``origin``)."""
    lines: list[str] = []
    replace_next: str | None = None
    for line in source.splitlines(keepends=True):
        directive = DIRECTIVE.match(line)
        if directive:
            replace_next = directive.group(2)
            continue
        if replace_next is not None:
            indent = line[: len(line) - len(line.lstrip())]
            line, replace_next = f"{indent}{replace_next}\n", None
        lines.append(line)
    text = "".join(lines)
    for pattern, replacement in PATTERNS:
        if replacement is None:
            text = pattern.sub(lambda m: WORDS[m.group(1)], text)
        else:
            text = pattern.sub(replacement, text)
    header = f"# Generated from {origin} by scripts/unasync.py: edit that file, not this one.\n"
    return tidy(header + text, origin.replace("async_", ""))


def tidy(text: str, name: str) -> str:
    """``text`` as ruff sorts imports and formats it (shorter names join lines again)."""
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    for command in (["check", "--select", "I", "--fix-only", "--quiet"], ["format", "--quiet"]):
        text = subprocess.run(
            [ruff, *command, "--stdin-filename", name, "-"],
            input=text,
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout
    return text


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for source, target in PAIRS.items():
        made = unasync((ROOT / source).read_text(), source)
        path = ROOT / target
        if path.exists() and path.read_text() == made:
            continue
        if check:
            stale.append(target)
        else:
            path.write_text(made)
            print(f"wrote {target}")
    if stale:
        print(
            f"{', '.join(stale)} differ from what scripts/unasync.py makes of their asyncio "
            "sources: edit the async_*.py files and run `python scripts/unasync.py`",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
