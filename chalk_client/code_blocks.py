"""Fenced code blocks in a model's answer, and the languages their fences name.

The ``tests`` judge takes the program it runs from the last assistant message
(``language: auto`` reads the language from the block's fence), and the
integrations' ``CodeBlockSubmission`` takes a file from a completion, both by
these rules: Markdown fences of three or more backticks or tildes, closed by
the same fence; an unclosed fence is no block.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_FENCE = re.compile(
    r"^(?P<indent>[ \t]{0,3})(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)\n"
    r"(?P<body>.*?)"
    r"^(?P=indent)(?P=fence)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)

LANGUAGE_ALIASES: dict[str, frozenset[str]] = {
    "python": frozenset({"python", "py", "python3"}),
    "c": frozenset({"c"}),
    "cpp": frozenset({"cpp", "c++", "cc", "cxx"}),
    "java": frozenset({"java"}),
    "go": frozenset({"go", "golang"}),
    "rust": frozenset({"rust", "rs"}),
    "javascript": frozenset({"javascript", "js", "node", "nodejs"}),
    "bash": frozenset({"bash", "sh", "shell"}),
}
"""Each language the ``tests`` judge runs, and the fence tags (and names) that mean it."""

_CANONICAL = {alias: name for name, aliases in LANGUAGE_ALIASES.items() for alias in aliases}


def canonical_language(name: str) -> str | None:
    """The language ``name`` means (``"c++"`` is ``"cpp"``), or ``None`` if none of ours."""
    return _CANONICAL.get(name.strip().lower())


@dataclass(frozen=True)
class CodeBlock:
    """One fenced block: the first word of its info string (lowercase), and its text."""

    tag: str
    body: str

    @property
    def language(self) -> str | None:
        """The language its tag names, or ``None`` (no tag, or one of no language of ours)."""
        return canonical_language(self.tag) if self.tag else None


def code_blocks(text: str) -> list[CodeBlock]:
    """Every complete fenced block of ``text``, in order."""
    return [
        CodeBlock(match["info"].strip().split(" ")[0].lower(), match["body"])
        for match in _FENCE.finditer(text)
    ]


def extract_code_block(text: str, language: str | None = "python") -> str | None:
    """The last complete fenced code block of ``text`` (Markdown ``````` or ``~~~``).

    With ``language``, blocks tagged with it (or an alias: ``python`` also takes
    ``py`` and ``python3``) come first, then untagged ones; blocks tagged with
    another language are skipped. With ``language=None``, the last block of any
    kind. ``None`` when there is no such block (an unclosed fence does not count).
    """
    blocks = code_blocks(text)
    if language is None:
        return blocks[-1].body if blocks else None
    wanted = canonical_language(language)
    names = LANGUAGE_ALIASES[wanted] if wanted else frozenset({language.lower()})
    tagged = [block.body for block in blocks if block.tag in names]
    if tagged:
        return tagged[-1]
    untagged = [block.body for block in blocks if not block.tag]
    return untagged[-1] if untagged else None
