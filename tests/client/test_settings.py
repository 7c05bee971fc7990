"""Settings: small parts (store, LLM, sandbox, limits, run) under the same ``CHALK_*`` names."""

from __future__ import annotations

import ast
import inspect
import itertools
import textwrap

import pytest
from pydantic import ValidationError

from chalk_client import ChalkSettings
from chalk_client.settings import (
    CallbackSettings,
    LimitSettings,
    LLMSettings,
    ProgramSettings,
    RunSettings,
    SandboxSettings,
    StoreSettings,
)

PARTS = (
    StoreSettings,
    LLMSettings,
    SandboxSettings,
    LimitSettings,
    ProgramSettings,
    CallbackSettings,
    RunSettings,
)


def _documented(part: type) -> set[str]:
    """The fields of ``part`` with a docstring right under them, in its source."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(part)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    found = set()
    for statement, following in itertools.pairwise(body):
        if not (isinstance(statement, ast.AnnAssign) and isinstance(following, ast.Expr)):
            continue
        if isinstance(following.value, ast.Constant) and isinstance(following.value.value, str):
            found.add(statement.target.id)  # type: ignore[union-attr]
    return found


def test_every_setting_belongs_to_exactly_one_part_and_is_documented():
    names = [name for part in PARTS for name in part.model_fields]
    assert len(names) == len(set(names))
    assert set(names) == set(ChalkSettings.model_fields)
    for part in PARTS:
        missing = set(part.model_fields) - _documented(part)
        assert not missing, f"{part.__name__}: no docstring under {sorted(missing)}"


def test_each_part_reads_the_same_variables_as_the_whole(monkeypatch):
    monkeypatch.setenv("CHALK_LEASE_S", "7.5")
    monkeypatch.setenv("CHALK_RUBRIC_TEMPERATURE", "none")
    monkeypatch.setenv("CHALK_SANDBOX_PATHS", "/data/a, /data/b")
    monkeypatch.setenv("CHALK_TASK_MODULES", '["grading.judges"]')
    monkeypatch.setenv("CHALK_MAX_WALL_S", "30")
    whole = ChalkSettings()
    assert (StoreSettings().lease_s, whole.lease_s, whole.store.lease_s) == (7.5, 7.5, 7.5)
    assert LLMSettings().rubric_temperature is None and whole.llm.rubric_temperature is None
    assert SandboxSettings().sandbox_paths == whole.sandbox.sandbox_paths == ["/data/a", "/data/b"]
    assert RunSettings().task_modules == whole.task_modules == ["grading.judges"]
    assert whole.limits.resolve().wall_s == LimitSettings().resolve().wall_s == 30.0


def test_arguments_win_and_bad_values_are_refused_naming_the_whole():
    settings = ChalkSettings(queue="parked", lease_s=3)
    assert (settings.queue, settings.store.queue, settings.lease_s) == ("parked", "parked", 3.0)
    assert isinstance(settings, LLMSettings)  # a function taking the LLM part takes the whole
    with pytest.raises(ValidationError) as refused:
        ChalkSettings(llm_max_in_flight=0)
    assert refused.value.title == "ChalkSettings"  # what `chalk` reports as a bad setting
