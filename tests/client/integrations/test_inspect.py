"""The inspect_ai scorer and ``chalk score --from-inspect``, against the real inspect_ai.

Every eval here is a real ``eval()`` on inspect's ``mockllm/model`` with
scripted outputs (token usage given, so inspect counts no tokens itself and
needs no network); its log is written and read back by inspect.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

inspect_ai = pytest.importorskip("inspect_ai")

from inspect_ai import Task, eval  # noqa: E402
from inspect_ai.dataset import Sample  # noqa: E402
from inspect_ai.log import EvalLog  # noqa: E402
from inspect_ai.model import (  # noqa: E402
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
    ContentImage,
    ContentReasoning,
    ContentText,
    ModelOutput,
    ModelUsage,
    get_model,
)
from inspect_ai.solver import generate  # noqa: E402
from inspect_ai.tool import ToolCall  # noqa: E402

from chalk_client import JobResult  # noqa: E402
from chalk_client.errors import InvalidJobError, UnknownJudgeError  # noqa: E402
from chalk_client.integrations.inspect import chalk_scorer  # noqa: E402
from chalk_client.integrations.inspect_logs import message_dicts, transcript_of  # noqa: E402
from chalk_client.integrations.submissions import CodeBlockSubmission  # noqa: E402
from chalk_client.judges import (  # noqa: E402
    CustomJudge,
    ExecutableJudge,
    RegexJudge,
    RubricJudge,
)
from chalk_worker.testing.fake_openai import FakeOpenAI  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def mock_model(*answers: str) -> Any:
    """inspect's mock model answering ``answers`` in order."""
    outputs = []
    for text in answers:
        output = ModelOutput.from_content(model="mockllm/model", content=text)
        output.usage = ModelUsage(input_tokens=10, output_tokens=5, total_tokens=15)
        outputs.append(output)
    return get_model("mockllm/model", custom_outputs=outputs)


def run(task: Task, model: Any, log_dir: Path, **options: Any) -> EvalLog:
    [log] = eval(task, model=model, log_dir=str(log_dir), display="none", **options)
    return log


ARITHMETIC = [
    Sample(input="What is 6 x 7?", target="42", id="six"),
    Sample(input="What is 6 x 8?", target="48", id="eight"),
]


def test_scores_land_in_the_log_with_value_answer_explanation_and_metadata(tmp_path):
    task = Task(
        dataset=ARITHMETIC,
        solver=generate(),
        scorer=chalk_scorer(judge=lambda s: RegexJudge([rf"\b{s.columns['target']}\b"])),
    )
    log = run(task, mock_model("It is 42.", "It is 46."), tmp_path)
    assert log.status == "success"
    scores = {sample.id: sample.scores["chalk_scorer"] for sample in log.samples}
    assert scores["six"].value == 1.0 and scores["eight"].value == 0.0
    assert scores["six"].answer == "It is 42."
    assert scores["eight"].explanation == "unmatched_patterns: \\b48\\b"
    assert scores["eight"].metadata["chalk_job_id"].startswith("inspect-")
    assert scores["eight"].metadata["steps"][0]["continue_task"] is False
    metrics = log.results.scores[0].metrics
    assert metrics["mean"].value == 0.5


def test_rubric_reasons_become_the_explanation(tmp_path):
    with FakeOpenAI() as fake:
        judge = RubricJudge(
            rubric=[
                {"criterion": "The answer is right (met)", "weight": 0.75},
                {"criterion": "The answer shows its work", "weight": 0.25},
            ]
        )
        task = Task(
            dataset=ARITHMETIC[:1],
            solver=generate(),
            scorer=chalk_scorer(judge=judge, settings=fake.settings()),
        )
        log = run(task, mock_model("42"), tmp_path)
    [sample] = log.samples
    score = sample.scores["chalk_scorer"]
    assert score.value == 0.75
    assert score.explanation.splitlines() == [
        "The answer is right (met): YES: it is there",
        "The answer shows its work: NO: it is not there",
    ]
    assert "What is 6 x 7?" in fake.requests[0].prompt  # the transcript holds the input
    assert log.eval.scorers[0].options["judge"]["type"] == "rubric"


def test_a_failed_job_is_the_sample_s_error_not_a_zero(tmp_path):
    def judge(sample):
        if sample.columns["target"] == "48":
            return CustomJudge("registered_nowhere")
        return RegexJudge(["42"])

    task = Task(dataset=ARITHMETIC, solver=generate(), scorer=chalk_scorer(judge=judge))
    log = run(task, mock_model("42", "48"), tmp_path, fail_on_error=False)
    by_id = {sample.id: sample for sample in log.samples}
    assert by_id["six"].scores["chalk_scorer"].value == 1.0
    assert by_id["eight"].error is not None
    assert "registered_nowhere" in by_id["eight"].error.message
    assert not by_id["eight"].scores
    assert log.results.scores[0].metrics["mean"].value == 1.0  # not dragged down by a zero


def test_by_default_a_failed_job_fails_the_eval_as_inspect_errors_do(tmp_path):
    task = Task(
        dataset=ARITHMETIC[:1],
        solver=generate(),
        scorer=chalk_scorer(judge=lambda s: CustomJudge("registered_nowhere")),
    )
    log = run(task, mock_model("42"), tmp_path)
    assert log.status == "error"
    assert "registered_nowhere" in log.error.message


def test_code_from_the_model_runs_sandboxed_as_the_submission(tmp_path):
    check = (
        "import json, pathlib, sys; ns = {}; exec(pathlib.Path(sys.argv[1]).read_text(), ns); "
        "ok = ns['square'](7) == 49; "
        "pathlib.Path(sys.argv[2]).write_text(json.dumps({'score': float(ok), 'metadata': {}}))"
    )
    task = Task(
        dataset=[Sample(input="Write square(x).", target="", id=n) for n in (1, 2)],
        solver=generate(),
        scorer=chalk_scorer(
            judge=ExecutableJudge(["{python}", "-c", check, "{submission}", "out.json"]),
            submission=CodeBlockSubmission("solution.py"),
        ),
    )
    right = "```python\ndef square(x):\n    return x * x\n```"
    wrong = "```python\ndef square(x):\n    return x + x\n```"
    log = run(task, mock_model(right, wrong), tmp_path)
    assert sorted(s.scores["chalk_scorer"].as_float() for s in log.samples) == [0.0, 1.0]


def test_judges_that_cannot_work_here_are_refused_when_the_scorer_is_made():
    with pytest.raises(UnknownJudgeError):
        chalk_scorer(judge=CustomJudge("registered_nowhere"))
    with pytest.raises(InvalidJobError):
        chalk_scorer(judge={"type": "regex"})


def test_a_password_in_redis_url_is_warned_about_as_inspect_logs_arguments(caplog):
    with caplog.at_level(logging.WARNING, "chalk_client.integrations"):
        chalk_scorer(judge=RegexJudge(["x"]), redis_url="redis://:hunter2@127.0.0.1:1/0")
    assert "SecretStr" in caplog.text and "hunter2" not in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, "chalk_client.integrations"):
        chalk_scorer(judge=RegexJudge(["x"]), redis_url=SecretStr("redis://:hunter2@h:1/0"))
    assert not caplog.text


def test_inspect_messages_become_chalk_messages():
    messages: list[ChatMessage] = [
        ChatMessageSystem(content="Be careful."),
        ChatMessageUser(content="Add 1 and 2."),
        ChatMessageAssistant(
            content=[
                ContentReasoning(reasoning="Use the tool."),
                ContentText(text="Calling add."),
                ContentImage(image="data:image/png;base64," + "A" * 1000),
            ],
            tool_calls=[ToolCall(id="c1", function="add", arguments={"a": 1, "b": 2})],
        ),
        ChatMessageTool(content="3", tool_call_id="c1", function="add"),
        ChatMessageAssistant(content="It is 3."),
    ]
    dicts = message_dicts(messages)
    assert dicts[2]["content"] == [
        {"type": "reasoning", "text": "Use the tool."},
        {"type": "text", "text": "Calling add."},
        {"type": "image"},
    ]
    assert dicts[2]["tool_calls"][0]["function"] == {"name": "add", "arguments": '{"a": 1, "b": 2}'}
    assert dicts[3] == {"role": "tool", "content": "3", "tool_call_id": "c1", "name": "add"}
    transcript = transcript_of(messages)
    assert transcript.assistant_text() == "Calling add.\n\nIt is 3."


def chalk(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHALK_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "chalk_client.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )


@pytest.fixture
def eval_log(tmp_path: Path) -> Path:
    """A real inspect log of two samples, scored by inspect's own ``match`` scorer."""
    from inspect_ai.scorer import match

    log = run(
        Task(dataset=ARITHMETIC, solver=generate(), scorer=match()),
        mock_model("42", "It is 46."),
        tmp_path / "logs",
    )
    return Path(log.location)


def test_chalk_score_from_inspect_scores_every_sample_and_resumes(eval_log, tmp_path):
    judge = tmp_path / "judge.json"
    judge.write_text(RegexJudge([r"\b4[28]\b"]).model_dump_json())
    out = tmp_path / "results.jsonl"
    done = chalk(
        "score",
        "--from-inspect",
        str(eval_log),
        "--judge",
        str(judge),
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    results = [JobResult.model_validate_json(line) for line in out.read_text().splitlines()]
    by_sample = {r.metadata["sample_id"]: r for r in results}
    assert by_sample["six"].score == 1.0 and by_sample["eight"].score == 0.0
    assert by_sample["six"].metadata["target"] == "42"
    assert by_sample["six"].metadata["inspect_model"] == "mockllm/model"
    again = chalk(
        "score",
        "--from-inspect",
        str(eval_log),
        "--judge",
        str(judge),
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert again.returncode == 0 and "Skipped 2 jobs" in again.stderr
    assert len(out.read_text().splitlines()) == 2


def test_chalk_score_from_inspect_refuses_what_it_cannot_read(eval_log, tmp_path):
    judge = tmp_path / "judge.json"
    judge.write_text('{"type": "always_pass"}')
    without_judge = chalk("score", "--from-inspect", str(eval_log), cwd=tmp_path)
    assert without_judge.returncode == 2 and "needs --judge" in without_judge.stderr
    not_a_log = chalk("score", "--from-inspect", str(judge), "--judge", str(judge), cwd=tmp_path)
    assert not_a_log.returncode == 2 and "could not read the inspect log" in not_a_log.stderr
    both = chalk("score", str(judge), "--from-inspect", str(eval_log), cwd=tmp_path)
    assert both.returncode == 2 and "one" in both.stderr


def test_without_inspect_ai_the_error_names_the_extra():
    code = (
        "import sys; sys.modules['inspect_ai'] = None\n"
        "try:\n    import chalk_client.integrations.inspect\n"
        "except ImportError as exc:\n    print(type(exc).__name__, exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert "MissingExtraError" in done.stdout and "chalk-queue[inspect]" in done.stdout
