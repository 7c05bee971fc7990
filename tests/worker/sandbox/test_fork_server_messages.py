"""The fork server's messages: the view and a Python command read back with their kinds checked."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from chalk_worker.sandbox.bwrap import view_entries
from chalk_worker.sandbox.pycommand import CommandData, PythonCommand, parse_python_command
from chalk_worker.sandbox.wire import parse_view


def test_a_view_comes_back_from_json_as_it_was_sent(tmp_path: Path):
    (tmp_path / "ro").mkdir()
    (tmp_path / "rw").mkdir()
    view = view_entries(
        readonly=[tmp_path / "ro"], writable=[tmp_path / "rw"], tmp_bytes=1 << 20, hide=tmp_path
    )
    sent = json.loads(json.dumps([list(entry) for entry in view]))
    assert parse_view(sent) == view
    assert {kind for kind, _, _ in view} >= {"proc", "dev", "tmpfs", "ro", "rw"}


@pytest.mark.parametrize(
    ("view", "said"),
    [
        ([["overlay", "/usr", ""]], "unknown view entry kind 'overlay'"),
        ([["ro", "/usr"]], "a view entry is [kind, path, detail]"),
        ([["ro", "/usr", 0]], "a view entry is [kind, path, detail]"),
        ({"ro": "/usr"}, "a fork server's view is a list, not dict"),
    ],
)
def test_a_view_entry_of_an_unknown_kind_or_shape_is_refused(view: object, said: str):
    with pytest.raises(ValueError) as caught:
        parse_view(view)
    assert said in str(caught.value)


def test_a_python_command_comes_back_from_json_with_its_kind():
    for argv in (["-c", "pass", "a"], ["-m", "tasks.score", "b"], ["score.py", "c"]):
        command = parse_python_command([sys.executable, *argv])
        assert command is not None
        back = PythonCommand.from_json(json.loads(json.dumps(command.to_json())))
        assert (back.kind, back.target, back.args) == (command.kind, command.target, command.args)
    assert [
        parse_python_command([sys.executable, *argv]).kind  # type: ignore[union-attr]
        for argv in (["-c", "pass"], ["-m", "x"], ["x.py"])
    ] == ["code", "module", "script"]


def test_a_python_command_of_an_unknown_kind_is_refused():
    data: CommandData = json.loads('{"kind": "zipapp", "target": "app.pyz", "args": []}')
    with pytest.raises(ValueError, match="unknown kind of Python command 'zipapp'"):
        PythonCommand.from_json(data)
