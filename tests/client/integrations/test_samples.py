"""What the integrations share: samples, transcripts, code blocks and submissions."""

from __future__ import annotations

import json

import pytest

from chalk_client.errors import InvalidJobError
from chalk_client.integrations import (
    CodeBlockSubmission,
    Sample,
    TextSubmission,
    default_transcript,
    extract_code_block,
)


def files(submission) -> dict[str, str]:
    return dict(submission.files)


def test_the_last_block_in_the_language_wins():
    text = (
        "First try:\n```python\nx = 1\n```\nIn shell:\n```sh\nrm -rf /\n```\n"
        "Better:\n```py\nx = 2\n```\nDone."
    )
    assert extract_code_block(text) == "x = 2\n"
    assert extract_code_block(text, "sh") == "rm -rf /\n"
    assert extract_code_block(text, None) == "x = 2\n"


def test_untagged_blocks_count_when_no_block_has_the_language():
    assert extract_code_block("```\nprint(1)\n```") == "print(1)\n"
    assert extract_code_block("```js\nalert(1)\n```\n~~~\nprint(2)\n~~~") == "print(2)\n"
    assert extract_code_block("```js\nalert(1)\n```") is None


def test_no_block_or_an_unclosed_one_is_none():
    assert extract_code_block("def f(): pass") is None
    assert extract_code_block("```python\ndef f(): pass\n") is None


def test_a_longer_fence_can_hold_a_shorter_one():
    text = "````python\ns = '''\n```\n'''\n````"
    assert extract_code_block(text) == "s = '''\n```\n'''\n"


def test_the_text_of_a_chat_completion_is_its_assistant_text():
    sample = Sample(
        completion=[
            {"role": "assistant", "content": "Let me look.", "tool_calls": []},
            {"role": "tool", "content": "secret tool output", "tool_call_id": "1"},
            {"role": "assistant", "content": [{"type": "text", "text": "Answer: 4"}]},
        ]
    )
    assert sample.text == "Let me look.\n\nAnswer: 4"
    assert Sample(completion="plain").text == "plain"


def test_the_transcript_is_the_prompt_then_the_completion():
    chat = Sample(
        prompt=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
        completion=[{"role": "assistant", "content": "4"}],
    )
    assert [(m.role, m.content) for m in default_transcript(chat).messages] == [
        ("system", "Be brief."),
        ("user", "2+2?"),
        ("assistant", "4"),
    ]
    text = default_transcript(Sample(prompt="2+2?", completion=" 4"))
    assert [(m.role, m.content) for m in text.messages] == [("user", "2+2?"), ("assistant", " 4")]


def test_tool_call_arguments_given_as_objects_become_json():
    sample = Sample(
        completion=[
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"type": "function", "function": {"name": "add", "arguments": {"a": 1}}}
                ],
            }
        ]
    )
    [message] = default_transcript(sample).messages
    assert json.loads(message.tool_calls[0].function.arguments) == {"a": 1}


def test_a_completion_that_is_neither_text_nor_messages_is_refused():
    with pytest.raises(InvalidJobError, match="text or a list of chat messages"):
        default_transcript(Sample(completion=42))  # type: ignore[arg-type]


def test_a_code_block_submission_holds_the_code_and_the_row_s_files():
    build = CodeBlockSubmission("solution.py", files_from_columns={"tests.py": "tests"})
    sample = Sample(
        completion="Sure:\n```python\ndef f():\n    return 1\n```",
        columns={"tests": "def test_f():\n    assert f() == 1\n"},
    )
    assert files(build(sample)) == {
        "solution.py": "def f():\n    return 1\n",
        "tests.py": "def test_f():\n    assert f() == 1\n",
    }
    assert build.columns == ("tests",)


def test_without_a_code_block_the_whole_text_is_handed_in():
    sample = Sample(completion="def f():\n    return 1")
    assert files(CodeBlockSubmission()(sample)) == {"solution.py": "def f():\n    return 1"}


def test_row_values_that_are_not_text_are_written_as_json():
    numpy = pytest.importorskip("numpy")
    sample = Sample(completion="x", columns={"cases": numpy.array([[1, 2], [3, 4]])})
    built = TextSubmission("answer.txt", files_from_columns={"cases.json": "cases"})(sample)
    assert json.loads(files(built)["cases.json"]) == [[1, 2], [3, 4]]


def test_a_missing_or_empty_column_is_an_error_of_that_sample():
    build = TextSubmission(files_from_columns={"tests.py": "tests"})
    with pytest.raises(InvalidJobError, match="no column 'tests'"):
        build(Sample(completion="x", columns={"answer": "1"}))
    with pytest.raises(InvalidJobError, match="'tests' is empty"):
        build(Sample(completion="x", columns={"tests": None}))


@pytest.mark.parametrize("path", ["/etc/passwd", "../up.py", ""])
def test_submission_paths_are_checked_when_the_builder_is_made(path):
    with pytest.raises(InvalidJobError, match="relative"):
        CodeBlockSubmission(path)
    with pytest.raises(InvalidJobError, match="relative"):
        TextSubmission(files_from_columns={path: "tests"})


def test_the_completion_s_file_cannot_also_come_from_a_column():
    with pytest.raises(InvalidJobError, match="both"):
        CodeBlockSubmission("solution.py", files_from_columns={"solution.py": "reference"})
