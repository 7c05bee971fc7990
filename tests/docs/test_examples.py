"""Every code block of the docs runs, or is checked, in a test: the docs cannot drift.

The blocks are those of ``README.md``, of every page under ``docs/`` and of
``BENCHMARKS.md`` (which ``docs/benchmarks.md`` includes). By language:

- ``python``: run in a fresh interpreter, in a scratch folder, by ``run_python.py``:
  a line ``print(...)  # -> TEXT`` must print ``TEXT``.
- ``sh``: run by ``bash -euo pipefail`` in a scratch folder that links ``tasks/``,
  ``docs/``, ``bench/``, ``scripts/``, ``fuzz/``, ``mkdocs.yml``, ``BENCHMARKS.md`` and
  ``.venv`` of this checkout, the venv's ``bin`` first on ``PATH``. Every
  ``chalk`` command, and every ``python -m`` of this project's modules, is also
  checked against its own argument parser, in blocks that do not run too.
- ``json``: parsed, and validated by the model of what it is: a judge (it has a
  ``type``), a job (a ``transcript``), a result (a ``job_id``), a batch callback's
  body (a ``delivery_id``: the fields a worker sends), or a verdict's metadata
  (text values).
- ``yaml``: parsed; a judge in it is validated.
- ``text``: output or a synopsis; after ``<!-- output -->`` it must match what the
  block before it printed (``...`` stands for any text, or, alone on a line, for
  any lines).

Rubric judges ask a fake OpenAI-compatible server (``chalk_worker.testing``) whose
verdicts for the docs' criteria are ``VERDICTS`` below. How a block is marked
(not run, on a cluster, slow...) is in ``tests/doc_blocks.py``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from doc_blocks import (
    ROOT,
    Block,
    all_blocks,
    chain,
    following_output,
    problems,
    read_blocks,
    runs,
    sources,
)
from pydantic import TypeAdapter
from servers import ServerFactory

from chalk_client import BatchSummary, JobResult, ScoringJob
from chalk_client.callbacks import callback_body
from chalk_client.cli.main import _parser
from chalk_client.judges import JudgeSpec
from chalk_worker.testing.fake_openai import FakeOpenAI, Seen

RUNNER = Path(__file__).with_name("run_python.py")
DOCS_SERVER = "127.0.0.1:8080"
"""The address the docs give ``chalk serve``; a ``server`` block runs against the tests' own."""
INSTALL = 'python3 -m venv .venv && .venv/bin/pip install -e ".[dev]" && '
PROJECT_MODULES = ("chalk_client", "chalk_worker", "tasks", "bench", "fuzz")
LINKED = ("tasks", "docs", "bench", "scripts", "fuzz", "mkdocs.yml", "BENCHMARKS.md")

VERDICTS = {
    "The report identifies what caused the outage.": True,
    "The report suggests a remedy.": True,
    "The report explains how the remedy was verified.": False,
    "The test log shows every test passing.": True,
}
"""What the fake LLM says of each criterion the docs' examples grade."""

BLOCKS = all_blocks()
PAGES = {path: read_blocks(path) for path in sources()}


def block_id(block: Block) -> str:
    return f"{block.where}-{block.language}"


def options(block: Block) -> frozenset[str]:
    """The ``run:`` options of ``block`` and of the blocks it continues from."""
    return frozenset().union(*(b.run_options for b in chain(block, PAGES[block.path])))


def marks(block: Block) -> list[pytest.MarkDecorator]:
    return [pytest.mark.slow] if "slow" in options(block) else []


# --- the environment examples run in ---------------------------------------------------


@pytest.fixture(scope="session")
def fake_llm() -> Iterator[tuple[FakeOpenAI, list[str]]]:
    """The LLM of rubric examples, and the criteria it was asked that it has no verdict for."""
    unknown: list[str] = []

    def met(seen: Seen) -> bool:
        asked = [c for c in VERDICTS if c in seen.first_user_message]
        if len(asked) != 1:
            unknown.append(seen.first_user_message[-300:])
            return False
        return VERDICTS[asked[0]]

    with FakeOpenAI(met=met) as server:
        yield server, unknown


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """A folder with this checkout's ``LINKED`` files and its venv linked in."""
    for name in LINKED:
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    return tmp_path


def environment(fake_llm: FakeOpenAI, redis_url: str | None) -> dict[str, str]:
    """The examples' environment: none of the caller's Chalk or OpenAI settings."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("CHALK_", "OPENAI_", "COLUMNS"))
    }
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["OPENAI_BASE_URL"] = fake_llm.url
    env["OPENAI_API_KEY"] = "docs-example-key"
    if redis_url:
        env["CHALK_REDIS_URL"] = redis_url
    return env


@pytest.fixture(scope="session")
def docs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A ``chalk serve`` for the blocks marked ``server``; its ``host:port``."""
    factory = ServerFactory(tmp_path_factory.mktemp("docs-server"))
    yield factory().url.removeprefix("http://")
    factory.stop_all()


def served(block: Block, request: pytest.FixtureRequest) -> str | None:
    """The docs server's address, for a block that needs it (started on first use)."""
    if "server" not in options(block):
        return None
    address: str = request.getfixturevalue("docs_server")
    return address


def cluster_url(block: Block, request: pytest.FixtureRequest) -> str | None:
    if "cluster" not in options(block):
        return None
    request.getfixturevalue("shared_worker")
    url: str = request.getfixturevalue("redis_url")
    return url


# --- outputs -----------------------------------------------------------------------------


def matches(expected: str, actual: str) -> bool:
    """Whether ``actual`` holds ``expected``'s lines in a row (``...`` as described above)."""
    pieces = []
    for line in expected.strip("\n").splitlines():
        if line.strip() == "...":
            pieces.append(r"(?:.*\n)*?")
        else:
            words = line.rstrip().split("...")
            pieces.append(r"[ \t]*" + ".*".join(map(re.escape, words)) + r"[ \t]*\n")
    return re.search("".join(pieces), actual.rstrip("\n") + "\n") is not None


def check_output(block: Block, printed: str) -> None:
    output = following_output(block, PAGES[block.path])
    if output is not None:
        assert matches(output.code, printed), (
            f"{output.where}: the docs show\n{output.code}\nbut the block printed\n{printed}"
        )


# --- commands checked by their own parsers -----------------------------------------------


def logical_lines(code: str) -> Iterator[str]:
    """The shell lines of ``code``: continuations joined, quotes kept together."""
    pending = ""
    for line in code.replace("\\\n", " ").splitlines():
        pending = f"{pending}\n{line}" if pending else line
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # an open quote: the command goes on
            continue
        yield pending
        pending = ""
    if pending:
        yield pending


def commands(code: str) -> Iterator[list[str]]:
    """Each simple command of ``code`` as its words, without leading ``VAR=value``."""
    for line in logical_lines(code):
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words: list[str] = []
        for token in [*lexer, ";"]:
            if token and set(token) <= set("&|;<>()"):
                while words and re.fullmatch(r"[A-Za-z_]+=\S*", words[0]):
                    words.pop(0)
                if words:
                    yield words
                words = []
            else:
                words.append(token)


@cache
def help_text(*argv: str) -> str:
    done = subprocess.run(
        [sys.executable, *argv, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("CHALK_")},
    )
    assert done.returncode == 0, f"{' '.join(argv)} --help failed:\n{done.stderr[-2000:]}"
    return done.stdout


def flags(words: list[str]) -> list[str]:
    return [w.split("=", 1)[0] for w in words if w.startswith("-") and w not in ("-", "--")]


def check_command(words: list[str]) -> None:
    """A ``chalk`` or ``python -m`` command of this project, held to its argument parser."""
    program = Path(words[0]).name
    if program == "chalk":
        args = words[1:]
        if args[:1] in (["worker"], ["flower"]):
            known = help_text("-m", "chalk_client.cli", args[0])
            for option in flags(args[1:]):
                assert option in known, f"chalk {args[0]} has no option {option}"
            return
        try:
            _parser().parse_args(args)
        except SystemExit as exc:
            assert exc.code == 0, f"chalk's parser refuses: {shlex.join(words)}"
    elif re.fullmatch(r"python3?", program) and words[1:2] == ["-m"] and len(words) > 2:
        module = words[2]
        if module.split(".")[0] not in PROJECT_MODULES:
            return
        assert (ROOT / module.replace(".", "/")).with_suffix(".py").is_file() or (
            ROOT / module.replace(".", "/") / "__main__.py"
        ).is_file(), f"no module {module} in this project"
        given = flags(words[3:])
        if given:
            known = help_text("-m", module)
            for flag in given:
                assert flag in known, f"python -m {module} has no option {flag}"


def check_commands(block: Block) -> int:
    checked = 0
    for words in commands(block.code.replace(INSTALL, "")):
        check_command(words)
        checked += 1
    return checked


# --- running blocks ------------------------------------------------------------------------


def run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> str:
    done = subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"exit status {done.returncode}:\n{done.stdout[-6000:]}"
    return done.stdout


def run_python(block: Block, scratch: Path, env: dict[str, str], server: str | None) -> str:
    code = "".join(b.code for b in chain(block, PAGES[block.path]))
    if server:
        code = code.replace(DOCS_SERVER, server)
    example = scratch / "example.py"
    example.write_text(code)
    return run([sys.executable, str(RUNNER), str(example)], scratch, env, timeout=240)


def shell_code(block: Block) -> str:
    """What bash runs for ``block``: an after-install block without the install."""
    return after_install(block) if "after-install" in block.run_options else block.code


def after_install(block: Block) -> str:
    """The lines of an ``after-install`` block, without the install that made this venv."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python3 -m venv .venv" in ci and '-m pip install -q -e ".[dev]"' in ci
    kept = []
    for line in block.code.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            kept.append(line)
            continue
        assert line.startswith(INSTALL), f"{block.where}: a line without the install: {line}"
        rest = line.removeprefix(INSTALL)
        if rest == ".venv/bin/pytest":
            # The whole suite, this test among them: what CI runs after that same install.
            assert "\n.venv/bin/pytest\n" in ci
            continue
        kept.append(rest)
    return "\n".join(kept) + "\n"


def run_shell(block: Block, scratch: Path, env: dict[str, str], server: str | None) -> str:
    code = "".join(shell_code(b) for b in chain(block, PAGES[block.path]))
    if server:
        code = code.replace(DOCS_SERVER, server)
    script = "set -euo pipefail\n" + code
    return run(["bash", "-c", script], scratch, env, timeout=600)


def judges_in(value: Any) -> Iterator[Any]:
    """Every judge object under a ``judge`` key of ``value``, at any depth."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "judge" and isinstance(item, dict) and "type" in item:
                yield item
            yield from judges_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from judges_in(item)


def check_callback(data: dict[str, Any]) -> None:
    """A callback body as the docs show it has the fields a worker's has, no others."""
    summary = BatchSummary(total=1, succeeded=1, mean_score=1.0, batch_id="b-1")
    sent = json.loads(callback_body("d-1", "b-1", summary, 0.0))
    assert sorted(data) == sorted(sent), "the body's fields differ from a worker's"
    assert sorted(data["summary"]) == sorted(sent["summary"]), "the summary's fields differ"
    assert sorted(data["summary"]["counts"]) == sorted(sent["summary"]["counts"])


def check_json(block: Block) -> None:
    data = json.loads(block.code)
    if isinstance(data, dict) and "delivery_id" in data:
        check_callback(data)
    elif isinstance(data, dict) and "type" in data:
        TypeAdapter(JudgeSpec).validate_python(data)
    elif isinstance(data, dict) and "transcript" in data:
        ScoringJob.model_validate(data)
    elif isinstance(data, dict) and "job_id" in data:
        JobResult.model_validate(data)
    elif isinstance(data, dict) and all(isinstance(v, str) for v in data.values()):
        TypeAdapter(dict[str, str]).validate_python(data)
    else:
        raise AssertionError(f"{block.where}: a JSON block that is no judge, job or result")


def check_yaml(block: Block) -> None:
    data = yaml.safe_load(block.code)
    assert data is not None, f"{block.where}: an empty YAML block"
    for judge in judges_in(data):
        TypeAdapter(JudgeSpec).validate_python(judge)


@pytest.mark.parametrize("block", [pytest.param(b, id=block_id(b), marks=marks(b)) for b in BLOCKS])
def test_block(
    block: Block,
    scratch: Path,
    fake_llm: tuple[FakeOpenAI, list[str]],
    request: pytest.FixtureRequest,
) -> None:
    page = PAGES[block.path]
    assert not problems(block, page), f"{block.where}: {'; '.join(problems(block, page))}"
    if block.language == "sh":
        check_commands(block)
    if block.language == "json":
        check_json(block)
    elif block.language == "yaml":
        check_yaml(block)
    if not runs(block):
        return
    server, unknown = fake_llm
    asked_before = len(unknown)
    env = environment(server, cluster_url(block, request))
    address = served(block, request)
    if block.language == "python":
        printed = run_python(block, scratch, env, address)
    else:
        printed = run_shell(block, scratch, env, address)
    assert len(unknown) == asked_before, f"criteria without a verdict in VERDICTS: {unknown}"
    check_output(block, printed)


# --- the checks themselves ---------------------------------------------------------------


def test_the_docs_have_blocks_of_every_kind() -> None:
    found = {block.language for block in BLOCKS}
    assert found == {"python", "sh", "json", "yaml", "text"}
    assert len(BLOCKS) > 50


def test_outputs_match_with_gaps() -> None:
    printed = "Scored 4 jobs: 4 succeeded, 0 failed.\nMean score: 0.5000\nZeros: 2\n"
    assert matches("Scored 4 jobs: ... succeeded, 0 failed.\nMean score: 0.5000\n", printed)
    assert matches("Scored 4 jobs...\n...\nZeros: 2\n", printed)
    assert not matches("Mean score: 0.5000\nScored 4 jobs...\n", printed)
    assert not matches("Mean score: 0.6000\n", printed)


def test_commands_are_split_as_the_shell_splits_them() -> None:
    code = (
        "# a comment\nCI=true .venv/bin/pytest -s tests/x.py && chalk status  # why\n"
        'python3 -c "\nprint(1)"\nchalk score a.jsonl \\\n    --out b.jsonl\n'
    )
    assert list(commands(code)) == [
        [".venv/bin/pytest", "-s", "tests/x.py"],
        ["chalk", "status"],
        ["python3", "-c", "\nprint(1)"],
        ["chalk", "score", "a.jsonl", "--out", "b.jsonl"],
    ]


def test_a_command_chalk_does_not_take_is_caught() -> None:
    with pytest.raises(AssertionError, match="refuses"):
        check_command(["chalk", "score", "x.jsonl", "--no-such-option"])
    with pytest.raises(AssertionError, match="no option --no-such-flag"):
        check_command(["python", "-m", "bench.sandbox", "--no-such-flag"])
    with pytest.raises(AssertionError, match="no module"):
        check_command(["python", "-m", "bench.no_such_benchmark"])
    check_command(["chalk", "worker", "--concurrency", "128", "-n", "second@%h"])


def test_a_claim_the_example_does_not_keep_fails(tmp_path: Path) -> None:
    example = tmp_path / "example.py"
    example.write_text("print(6 * 7)  # -> 42\nprint('x', 1)  # -> x ...\nprint(1)  # -> 2\n")
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(example)], capture_output=True, text=True
    )
    assert done.returncode == 1
    assert done.stderr.strip() == "docs claim: line 3 printed '1', the docs say '2'"
    example.write_text("if False:\n    print(1)  # -> 1\n")
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(example)], capture_output=True, text=True
    )
    assert (done.returncode, done.stderr.strip()) == (1, "docs claim: line 2 never printed")


def test_a_block_marked_wrongly_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- not-run: -->\n```sh\nls\n```\n\n<!-- run: everywhere -->\n```python\npass\n```\n"
        "\n<!-- output -->\n```json\n{}\n```\n\n```console\n$ ls\n```\n"
    )
    blocks = read_blocks(page)
    found = [problems(block, blocks) for block in blocks]
    assert found[0] == ["not-run needs its reason, in a few words"]
    assert "run: takes" in found[1][0]
    assert "an output block is a text block" in found[2]
    assert "the fence names 'console'" in found[3][0]
