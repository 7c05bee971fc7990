"""Which modules of a task package the worker imports to find custom judges and contexts."""

from __future__ import annotations

from pathlib import Path

from chalk_worker.judges.tasks_loader import task_modules


def write(root: Path, relative: str, text: str = "") -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_modules_that_register_are_found_wherever_they_are_named(tmp_path):
    task = tmp_path / "my_task"
    write(task, "__init__.py")
    write(task, "judges.py")  # always: the documented name
    write(task, "contexts.py")
    write(task, "graders.py", "@register_judge('mine')\nclass Mine: ...\n")
    write(task, "views.py", "from chalk_client.judges import register_context\n")
    write(task, "scoring_script.py", "import sys\nopen(sys.argv[2], 'w')\n")  # never imported
    write(task, "helpers/__init__.py")
    write(task, "helpers/rubric_bits.py", "register_context('bits')(Bits)\n")
    write(task, "helpers/__init__.py")
    write(task, "data/loose.py", "register_judge('x')")  # a plain folder, not a subpackage
    write(task, "my-notes.py", "register_judge('y')")  # not importable by name
    write(task, "__pycache__/graders.cpython-311.py", "register_judge('z')")
    assert task_modules("tasks.my_task", task) == [
        "tasks.my_task.contexts",
        "tasks.my_task.graders",
        "tasks.my_task.helpers.rubric_bits",
        "tasks.my_task.judges",
        "tasks.my_task.views",
    ]


def test_a_registering_subpackage_init_is_found(tmp_path):
    task = tmp_path / "t"
    write(task, "__init__.py")
    write(task, "extra/__init__.py", "from chalk_client.judges import register_judge\n")
    assert task_modules("tasks.t", task) == ["tasks.t.extra"]
