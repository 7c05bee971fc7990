"""The settings reference page is generated from the settings classes, and kept so."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from pydantic_settings import BaseSettings

from chalk_client import ChalkSettings
from chalk_client.server.settings import ServerSettings

ROOT = Path(__file__).resolve().parents[2]


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "settings_reference", ROOT / "scripts" / "settings_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    return load_generator()


def test_the_page_is_what_the_settings_classes_give(generator, capsys) -> None:
    assert generator.main(["--check"]) == 0, capsys.readouterr().err


def test_every_setting_has_a_row(generator) -> None:
    parts = {part for _, part in generator.PARTS}
    listed = {name for part in parts - {ServerSettings} for name in part.model_fields}
    assert listed == set(ChalkSettings.model_fields)
    page = generator.PAGE.read_text()
    for name in ChalkSettings.model_fields:
        assert f"| `CHALK_{name.upper()}` |" in page
    assert ServerSettings in parts  # chalk serve's, apart: only the server reads them
    assert "| `CHALK_API_KEYS` |" in page
    for name in ServerSettings.model_fields.keys() - {"api_keys"}:
        assert f"| `CHALK_SERVER_{name.upper()}` |" in page


def test_a_stale_page_fails_the_check(generator, tmp_path, monkeypatch, capsys) -> None:
    stale = tmp_path / "settings.md"
    stale.write_text(generator.render().replace("`61000`", "`60000`"))
    monkeypatch.setattr(generator, "PAGE", stale)
    assert generator.main(["--check"]) == 1
    assert "python scripts/settings_reference.py" in capsys.readouterr().err


class Undocumented(BaseSettings):
    """A part whose second field has no docstring."""

    said: int = 1
    """This one is documented."""
    unsaid: int = 2


def test_a_setting_without_a_docstring_is_refused(generator, monkeypatch, capsys) -> None:
    with pytest.raises(generator.UndocumentedSetting, match="unsaid"):
        generator.field_docs(Undocumented)
    monkeypatch.setattr(generator, "PARTS", (*generator.PARTS, ("Undocumented", Undocumented)))
    assert generator.main(["--check"]) == 1
    assert "unsaid without a docstring" in capsys.readouterr().err
