"""The parts of a ``tests`` judge: test cases, how outputs are compared, the languages.

A test case is an input for the program's stdin and the output expected on its
stdout; a case whose expected output is ``null`` only runs the program, and
accepts any output of a run that ends well (exit status 0, within its limits).
How the two outputs are compared (``Compare``):

- ``"tokens"`` (the default): equal when their whitespace-separated tokens are;
- ``"exact"``: equal byte for byte (the same tokens laid out otherwise is a
  presentation error, ``PE``);
- ``"lines"``: equal once each line's trailing whitespace and the blank lines
  around the text are dropped (Judge0's rule);
- ``{"float_tolerance": 1e-6}``: tokens that both read as numbers may differ by
  that much, absolutely or relatively to the expected one; the others must match;
- ``{"checker": [COMMAND, ...]}``: a program of the grader's decides, run in the
  sandbox with the test's input, the program's output and the expected output
  as files (appended as three arguments, unless the command places them with
  ``{input}``, ``{output}`` and ``{expected}``): exit 0 accepted, 1 wrong
  answer, 2 presentation error (testlib's convention); what it prints on stdout
  or stderr is the test's ``detail``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
)

from chalk_client.code_blocks import LANGUAGE_ALIASES, canonical_language

LANGUAGES = tuple(LANGUAGE_ALIASES)
"""The languages the ``tests`` judge runs programs in."""

Language = Literal["python", "c", "cpp", "java", "go", "rust", "javascript", "bash"]
"""One of ``LANGUAGES``; aliases (``c++``, ``js``, ``py``...) are read as the language."""

CHECKER_FILES = ("{input}", "{output}", "{expected}")
"""Where a checker command places the test's files; appended in this order when it does not."""


def language_named(value: Any) -> Any:
    """``value`` as the language it names (``"C++"`` is ``"cpp"``), left as is when none."""
    if isinstance(value, str):
        return canonical_language(value) or value
    return value


class TestCase(BaseModel):
    """One test: what the program reads on stdin, and what it must write on stdout.

    ``input`` and ``output`` are read as ``stdin`` and ``stdout`` (the names
    many data sets use).
    """

    __test__ = False  # not a pytest test class, whatever its name

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    stdin: str = Field(default="", validation_alias=AliasChoices("stdin", "input"))
    """The program's standard input."""
    stdout: str | None = Field(validation_alias=AliasChoices("stdout", "output"))
    """The output expected of it; ``None`` (given as such, ``"stdout": null``): any output,
    if the run ends well. Left out, it is an error: a missing answer is not a free pass."""


class FloatTolerance(BaseModel):
    """Numbers may differ by ``float_tolerance``, absolutely or relatively."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    float_tolerance: float = Field(ge=0)


class Checker(BaseModel):
    """A program of the grader's decides each test (testlib's exit codes)."""

    model_config = ConfigDict(extra="forbid")

    checker: list[str] = Field(min_length=1)
    """Program and arguments, ``{python}`` and ``{submission_dir}`` as in executable judges,
    ``{input}``, ``{output}`` and ``{expected}`` where the files go."""

    @field_validator("checker")
    @classmethod
    def _places_all_files_or_none(cls, command: list[str]) -> list[str]:
        placed = [name for name in CHECKER_FILES if any(name in word for word in command)]
        if placed and len(placed) != len(CHECKER_FILES):
            raise ValueError(
                "a checker command places all of {input}, {output} and {expected} or none "
                f"(then they are appended in that order); it places only {', '.join(placed)}"
            )
        return command


def _compare_kind(value: Any) -> str | None:
    """Which form of ``Compare`` a value is meant to be, by its shape (``None``: none)."""
    if isinstance(value, str):
        return "name"
    if isinstance(value, Mapping) and len(value) == 1:
        return {"float_tolerance": "numbers", "checker": "checker"}.get(next(iter(value)))
    if isinstance(value, (FloatTolerance, Checker)):
        return "numbers" if isinstance(value, FloatTolerance) else "checker"
    return None


Compare = Annotated[
    Annotated[Literal["tokens", "exact", "lines"], Tag("name")]
    | Annotated[FloatTolerance, Tag("numbers")]
    | Annotated[Checker, Tag("checker")],
    Discriminator(
        _compare_kind,
        custom_error_type="compare",
        custom_error_message='compare is "tokens", "exact", "lines", {"float_tolerance": 1e-6} or '
        '{"checker": [COMMAND, ...]}',
    ),
]
"""How a test's output is compared with the expected one (see the module's docstring)."""
