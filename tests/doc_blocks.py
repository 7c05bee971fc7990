"""The fenced code blocks of the documentation, and what each asks of the tests.

A block is read with the HTML comment on the line before it, its *directive*:

- ``<!-- not-run: REASON -->``: not run, for the reason given (required). The
  ``chalk`` and ``python -m`` commands of a shell block are still checked.
- ``<!-- run: cluster -->``: run with ``CHALK_REDIS_URL`` pointing at a private
  Redis that a real ``chalk worker`` serves.
- ``<!-- run: server -->``: run beside a ``chalk serve`` of the tests (embedded
  queue, no keys); ``127.0.0.1:8080`` in the block stands for its address.
- ``<!-- run: slow -->``: run only with ``--slow`` (or ``CI=true``).
- ``<!-- run: after-install -->``: each line starts with the install that made
  this environment; the rest of the line runs.
- ``<!-- continues -->`` (or the ``run:`` option ``continues``): a block that goes
  on from the page's previous block of its language (a Python or shell block),
  which runs first, in the same folder.
- ``<!-- output -->``: a ``text`` block: what the block before it prints.

``run:`` values combine with commas (``<!-- run: cluster, slow -->``). Lines
``--8<--``, ``PATH``, ``--8<--`` in a block are replaced by that file of the
repository, as the site's snippets extension does (in that form ruff leaves the
block alone, not being Python).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LANGUAGES = ("python", "sh", "json", "yaml", "text")
RUN_OPTIONS = frozenset({"cluster", "server", "slow", "after-install", "continues"})
FENCE = re.compile(r"^(\s*)```(.*)$")
DIRECTIVE = re.compile(r"^<!--\s*([a-z-]+)(?::\s*(.*?))?\s*-->$")
SNIPPET = re.compile(r"^--8<--\n(.+)\n--8<--$", re.M)


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its text and its directive."""

    path: Path
    line: int
    """The line of its opening fence, from 1."""
    index: int
    """Its place among the blocks of its file, from 0."""
    language: str
    code: str
    directive: str = ""
    """The directive's name: ``not-run``, ``run``, ``continues``, ``output`` or ``""``."""
    argument: str = ""
    """What follows the directive's colon: a reason, or ``run:`` options."""

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def run_options(self) -> frozenset[str]:
        if self.directive == "continues":
            return frozenset({"continues"})
        if self.directive != "run":
            return frozenset()
        return frozenset(part.strip() for part in self.argument.split(","))


def sources() -> list[Path]:
    """Every Markdown file of the docs: README, the pages, and BENCHMARKS.md they include."""
    pages = sorted((ROOT / "docs").rglob("*.md"))
    return [ROOT / "README.md", *pages, ROOT / "BENCHMARKS.md"]


def read_blocks(path: Path) -> list[Block]:
    """The fenced blocks of ``path``, in order, each with the directive before it."""
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    number = 0
    while number < len(lines):
        fence = FENCE.match(lines[number])
        if not fence:
            number += 1
            continue
        indent, language = fence.group(1), fence.group(2).strip()
        if indent:
            raise ValueError(f"{path}:{number + 1}: an indented fence; keep fences at the margin")
        end = number + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        if end == len(lines):
            raise ValueError(f"{path}:{number + 1}: a fence that is never closed")
        before = number - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        directive = DIRECTIVE.match(lines[before].strip()) if before >= 0 else None
        blocks.append(
            Block(
                path=path,
                line=number + 1,
                index=len(blocks),
                language=language,
                code=include("\n".join(lines[number + 1 : end]) + "\n"),
                directive=directive.group(1) if directive else "",
                argument=(directive.group(2) or "") if directive else "",
            )
        )
        number = end + 1
    return blocks


def include(code: str) -> str:
    """``code`` with each snippet replaced by the file it names."""
    included = SNIPPET.sub(lambda m: (ROOT / m.group(1)).read_text().rstrip("\n"), code)
    if re.search(r"^-+ *8 *<", included, flags=re.M):
        raise ValueError(f"a snippet line that is not --8<-- on a line of its own: {code!r}")
    return included


def all_blocks() -> list[Block]:
    return [block for path in sources() for block in read_blocks(path)]


def problems(block: Block, page: list[Block]) -> list[str]:
    """What is wrong with how ``block`` is written down (not with what it does)."""
    found = []
    if block.language not in LANGUAGES:
        found.append(f"the fence names {block.language!r}; name one of {', '.join(LANGUAGES)}")
    if block.directive not in ("", "not-run", "run", "continues", "output"):
        found.append(f"unknown directive {block.directive!r}")
    if block.directive == "not-run" and len(block.argument.split()) < 3:
        found.append("not-run needs its reason, in a few words")
    if block.directive == "run" and not block.run_options <= RUN_OPTIONS:
        found.append(f"run: takes {', '.join(sorted(RUN_OPTIONS))}, not {block.argument!r}")
    if "continues" in block.run_options and not chain(block, page)[:-1]:
        found.append("continues follows a Python or shell block of the same page")
    if block.directive == "output":
        before = page[block.index - 1] if block.index else None
        if block.language != "text":
            found.append("an output block is a text block")
        if before is None or before.language not in ("python", "sh") or not runs(before):
            found.append("an output block follows a Python or shell block that runs")
    return found


def runs(block: Block) -> bool:
    """Whether the tests run ``block`` (Python and shell blocks not marked not-run)."""
    return block.language in ("python", "sh") and block.directive != "not-run"


def following_output(block: Block, page: list[Block]) -> Block | None:
    """The output block right after ``block``, if there is one."""
    after = page[block.index + 1] if block.index + 1 < len(page) else None
    return after if after is not None and after.directive == "output" else None


def chain(block: Block, page: list[Block]) -> list[Block]:
    """The blocks that run for ``block``: those it continues from, then itself."""
    blocks = [block]
    if block.language not in ("python", "sh"):
        return blocks
    while "continues" in blocks[0].run_options:
        earlier = [b for b in page[: blocks[0].index] if b.language == block.language]
        if not earlier:
            break
        blocks.insert(0, earlier[-1])
    return blocks
