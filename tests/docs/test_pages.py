"""The README is a front page whose links work, and the docs name only paths that exist.

``mkdocs build --strict`` checks the links between the site's pages (CI builds it,
and so does a block of ``docs/contributing.md``); the README lives outside the
site, so its links are checked here, as GitHub would follow them.
"""

from __future__ import annotations

import re
from pathlib import Path

from doc_blocks import ROOT, sources
from markdown.extensions.toc import slugify

README = ROOT / "README.md"
QUICK_START = (
    'python3 -m venv .venv && .venv/bin/pip install -e ".[dev]" && .venv/bin/chalk score '
    "tasks/example_task/rollouts.jsonl --judge tasks/example_task/judge.json --out results.jsonl",
    'python3 -m venv .venv && .venv/bin/pip install -e ".[dev]" && .venv/bin/pytest',
)
"""The README's two commands: set up and score the example, set up and run the tests."""
LINK = re.compile(r"\]\(([^)\s]+)\)")
REPO_PATH = re.compile(
    r"(?<![\w/.-])((?:chalk_client|chalk_worker|tasks|tests|bench|docs|scripts)/[\w./-]*)"
)
HYPOTHETICAL = ("tasks/my_task/",)
"""Paths the docs use as examples of the reader's own, not of this repository."""


def anchors(page: Path) -> set[str]:
    headings = re.findall(r"^#{1,6} (.+)$", page.read_text(), flags=re.M)
    return {slugify(re.sub(r"`", "", heading), "-") for heading in headings}


def test_the_readme_is_a_front_page() -> None:
    assert len(README.read_text().splitlines()) <= 300


def test_the_readme_keeps_its_two_commands() -> None:
    lines = README.read_text().splitlines()
    for command in QUICK_START:
        assert command in lines, f"the README lost its command: {command}"


def test_the_readme_s_links_lead_somewhere() -> None:
    for target in LINK.findall(README.read_text()):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        page = (README.parent / path).resolve()
        assert page.is_file(), f"the README links to {target}, which is not a file"
        if anchor:
            assert anchor in anchors(page), f"the README links to {target}: no such heading"


def test_every_path_the_docs_name_exists() -> None:
    missing = []
    for source in sources():
        for path in REPO_PATH.findall(source.read_text()):
            path = path.rstrip(".")
            if path.startswith(HYPOTHETICAL) or "…" in path:
                continue
            if not (ROOT / path).exists():
                missing.append(f"{source.relative_to(ROOT)}: {path}")
    assert not missing, "the docs name paths this repository does not have:\n" + "\n".join(missing)
