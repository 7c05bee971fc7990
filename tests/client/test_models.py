"""The models: what users build, send and read back, and how it survives JSON."""

from __future__ import annotations

import io
import re
import tarfile

import pytest
from pydantic import TypeAdapter, ValidationError

import chalk_client
from chalk_client import (
    JobResult,
    JobStatus,
    Message,
    Scoring,
    ScoringJob,
    Step,
    Submission,
    Transcript,
)
from chalk_client.judges import (
    AllJudge,
    AlwaysPassJudge,
    AnyJudge,
    CustomJudge,
    ExecutableJudge,
    FileContext,
    JudgeSpec,
    RegexJudge,
    RubricJudge,
    TestsJudge,
    TranscriptContext,
)


def roundtrip(model):
    return type(model).model_validate_json(model.model_dump_json())


def test_public_init_is_sorted():
    import chalk_worker
    from chalk_client import integrations, judges

    for module in (chalk_client, judges, chalk_worker, integrations):
        assert module.__all__ == sorted(module.__all__), module.__name__


def test_transcript_accepts_every_message_shape_and_roundtrips():
    transcript = Transcript(
        messages=[
            Message(role="system", content="be brief"),
            Message(role="user", content="what is 6*7?"),
            Message(
                role="assistant",
                content=[
                    {"type": "thinking", "thinking": "six sevens", "signature": "abc"},
                    {"type": "reasoning", "text": "it is 42"},
                    {"type": "text", "text": "answer: 42"},
                    {"type": "image", "source": {"type": "base64", "data": "AAAA"}},
                    {"type": "tool_use", "id": "t1", "name": "calc", "input": {"x": 6}},
                    {"type": "future_block", "payload": [1, 2]},
                ],
                tool_calls=[
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            ),
            Message(role="user", content=[{"type": "tool_result", "content": "42"}]),
            Message(role="tool", tool_call_id="c1", content="ok"),
        ],
        events=[{"type": "step_finished", "step": 1, "extra": {"a": [1]}}],
    )
    again = roundtrip(transcript)
    assert again == transcript
    assert again.messages[2].content[5].payload == [1, 2]  # unknown blocks are kept


def test_events_need_a_type():
    with pytest.raises(ValidationError, match="type"):
        Transcript(events=[{"name": "no type"}])


def test_assistant_text_is_only_what_the_student_said():
    transcript = Transcript(
        messages=[
            Message(role="system", content="SYSTEM"),
            Message(role="user", content="USER"),
            Message(role="assistant", content="first"),
            Message(
                role="assistant",
                content=[
                    {"type": "reasoning", "text": "REASONING"},
                    {"type": "thinking", "thinking": "THINKING"},
                    {"type": "text", "text": "second"},
                    {"type": "tool_use", "name": "x", "input": {"q": "TOOLINPUT"}},
                    {"type": "tool_result", "content": "TOOLRESULT"},
                ],
                tool_calls=[{"type": "function", "function": {"name": "f", "arguments": "ARGS"}}],
            ),
            Message(role="tool", content="TOOLMSG"),
            Message(role="assistant", content=None),
            Message(role="assistant", content=[{"type": "text", "text": "third"}]),
        ]
    )
    assert transcript.assistant_text() == "first\n\nsecond\n\nthird"


def test_scoring_converts_metadata_values_to_strings():
    scoring = Scoring(score=1, metadata={"n": 3, "ok": True, "nested": {"a": 1}})
    assert scoring.metadata == {"n": "3", "ok": "True", "nested": '{"a": 1}'}
    assert scoring.continue_task is True
    with pytest.raises(ValidationError):
        Scoring(score=float("nan"))


def test_scoring_turns_any_metadata_value_into_some_text():
    loop: list[object] = []
    loop.append(loop)
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    scoring = Scoring(
        score=1,
        metadata={"mixed": {1: "a", "b": 2}, "odd": [{1, 2}], "loop": loop, "deep": deep},
    )
    assert scoring.score == 1
    assert scoring.metadata["mixed"] == '{"1": "a", "b": 2}'
    assert scoring.metadata["odd"] == '["{1, 2}"]'
    assert scoring.metadata["loop"] == "[[...]]"
    assert scoring.metadata["deep"] == "(a value nested too deeply to show)"


def test_and_or_build_flattened_all_any():
    a, b, c = AlwaysPassJudge(), RegexJudge(["x"]), CustomJudge("j")
    both = a & b & c
    assert isinstance(both, AllJudge) and both.judges == [a, b, c]
    either = a | b | c
    assert isinstance(either, AnyJudge) and either.judges == [a, b, c]
    mixed = (a & b) | c
    assert isinstance(mixed, AnyJudge) and mixed.judges == [AllJudge(judges=[a, b]), c]
    with pytest.raises(TypeError):
        a & "not a judge"  # type: ignore[operator]


def test_every_judge_roundtrips_through_json_with_regex_flags():
    judge = (
        RegexJudge([re.compile(r"answer:\s*42", re.IGNORECASE | re.MULTILINE), "plain", r"\d+"])
        & ExecutableJudge(["{python}", "score.py", "{submission}", "out.json"], cwd="/tmp")
        & (AlwaysPassJudge() | CustomJudge("mine", {"expected": "x", "n": [1, 2]}))
        & RubricJudge(
            rubric=[{"criterion": "names the cause", "weight": 0.5}],
            context=[FileContext(["report.md"]), TranscriptContext()],
            model="m",
        )
    )
    again = roundtrip(judge)
    assert again == judge
    pattern = again.judges[0].patterns[0]
    assert pattern.flags & re.IGNORECASE and pattern.flags & re.MULTILINE
    assert pattern.search("ANSWER:   42")


def test_regex_accepts_flags_by_name_and_refuses_bad_patterns():
    judge = RegexJudge.model_validate(
        {"type": "regex", "patterns": [{"pattern": "^x$", "flags": ["MULTILINE", "IGNORECASE"]}]}
    )
    assert judge.patterns[0].search("a\nX\nb")
    with pytest.raises(ValidationError, match="invalid regular expression"):
        RegexJudge(["(unclosed"])
    with pytest.raises(ValidationError, match="unknown regex flag"):
        RegexJudge([{"pattern": "x", "flags": ["SHOUTING"]}])


@pytest.mark.parametrize(
    "flags",
    [
        259,  # found by fuzz.jobs: IGNORECASE | TEMPLATE, deprecated, warned while loading a job
        int(re.DEBUG),  # would print each compile of the pattern to the worker's output
        -1,
        1 << 40,
    ],
)
def test_regex_flags_that_match_nothing_differently_are_refused(flags, capsys):
    with pytest.raises(ValidationError, match="flags a judge's pattern may not have"):
        RegexJudge.model_validate_json(
            f'{{"type": "regex", "patterns": [{{"pattern": "x", "flags": {flags}}}]}}'
        )
    assert capsys.readouterr().out == ""  # nothing compiled, so nothing printed


def test_a_compiled_pattern_with_the_debug_flag_is_refused(capsys):
    pattern = re.compile("x", re.DEBUG)
    capsys.readouterr()
    with pytest.raises(ValidationError, match="flags a judge's pattern may not have"):
        RegexJudge([pattern])


def test_regex_flags_given_as_an_int_come_back_by_name():
    flags = int(re.IGNORECASE | re.DOTALL | re.UNICODE)
    judge = RegexJudge.model_validate(
        {"type": "regex", "patterns": [{"pattern": "x", "flags": flags}]}
    )
    assert judge.model_dump(mode="json")["patterns"] == [
        {"pattern": "x", "flags": ["IGNORECASE", "DOTALL"]}
    ]


@pytest.mark.parametrize("pattern", ["(" * 2000 + ")" * 2000, "(?:a" * 2000 + ")" * 2000])
def test_a_pattern_nested_too_deeply_for_re_is_a_validation_error(pattern):
    # re raised RecursionError, which pydantic let through as it was: no validation error
    with pytest.raises(ValidationError, match="nest too deeply"):
        RegexJudge([pattern])
    with pytest.raises(ValidationError, match="nest too deeply"):
        ScoringJob.model_validate_json(
            f'{{"judge": {{"type": "regex", "patterns": [{{"pattern": "{pattern}"}}]}}}}'
        )


def test_a_command_given_as_one_string_is_refused_with_the_list_it_meant():
    with pytest.raises(ValidationError) as refused:
        ExecutableJudge("{python} -m tasks.t.score '{submission}' out.txt")  # type: ignore[arg-type]
    message = str(refused.value)
    assert "a list of arguments, not one string" in message
    assert '["{python}", "-m", "tasks.t.score", "{submission}", "out.txt"]' in message
    with pytest.raises(ValidationError, match="not one string"):
        ScoringJob.model_validate_json('{"judge": {"type": "executable", "command": "x out"}}')


def test_executable_judge_needs_an_output_file_name():
    assert ExecutableJudge(["python", "score.py", "out.txt"]).command[-1] == "out.txt"
    with pytest.raises(ValidationError, match="output file"):
        ExecutableJudge(["score-only"])
    with pytest.raises(ValidationError, match="output file"):
        ExecutableJudge(["python", ".."])


def test_job_needs_exactly_one_of_judge_or_steps():
    with pytest.raises(ValidationError, match="judge"):
        ScoringJob(transcript=Transcript())
    with pytest.raises(ValidationError, match="not both"):
        ScoringJob(judge=AlwaysPassJudge(), steps=[Step(AlwaysPassJudge())])
    job = ScoringJob(judge=AlwaysPassJudge())
    assert [step.judge for step in job.scored_steps()] == [AlwaysPassJudge()]
    assert job.with_id().id and job.with_id().id != job.with_id().id


@pytest.mark.parametrize("path", ["/etc/passwd", "../up", "a/../../b", ""])
def test_submission_paths_stay_inside_the_submission(path):
    with pytest.raises(ValidationError, match="relative"):
        ScoringJob(judge=AlwaysPassJudge(), submission_paths=[path])


def test_job_with_steps_and_submission_roundtrips():
    job = ScoringJob(
        id="job-1",
        transcript=Transcript(messages=[Message(role="assistant", content="hi")]),
        steps=[Step(RegexJudge(["hi"]), ["a.txt"]), Step(judge=AlwaysPassJudge())],
        submission=Submission.from_tar(b"\x00\x01not really a tar"),
        metadata={"seed": 3, "tags": ["a"]},
    )
    assert roundtrip(job) == job


def test_submission_from_dir_and_tar(tmp_path):
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "main.py").write_text("print(1)")
    (tmp_path / "src" / "README").write_text("hi")
    submission = Submission.from_dir(tmp_path / "src")
    with tarfile.open(fileobj=io.BytesIO(submission.archive_bytes())) as archive:
        assert sorted(archive.getnames()) == ["README", "pkg", "pkg/main.py"]
    archive_path = tmp_path / "s.tar.gz"
    archive_path.write_bytes(submission.archive_bytes())
    assert Submission.from_tar(archive_path) == submission
    assert Submission.from_tar(submission.archive_bytes()).digest() == submission.digest()
    with pytest.raises(chalk_client.InvalidJobError):
        Submission.from_dir(tmp_path / "missing")
    with pytest.raises(ValidationError, match="exactly one"):
        Submission()


def test_job_result_roundtrips_and_reports_its_score():
    result = JobResult(
        job_id="j",
        status=JobStatus.SUCCEEDED,
        scoring=Scoring(score=0.5),
        steps=[Scoring(score=1), Scoring(score=0.5)],
        attempts=1,
        timings={"total": 0.1},
        worker="host:1",
    )
    assert roundtrip(result) == result
    assert result.score == 0.5 and result.done
    assert JobResult(job_id="j", status="queued").done is False
    assert {s.value for s in JobStatus} == {"queued", "running", "succeeded", "failed", "cancelled"}


# DESIGN's parameters by position


def test_judges_and_steps_take_design_parameters_by_position():
    judge = ExecutableJudge(["x", "o"], 0.5)
    assert judge.command == ["x", "o"] and judge.continue_threshold == 0.5
    full = ExecutableJudge(["{python}", "s.py", "out.json"], 1.0, "/srv", 30)
    assert (full.continue_threshold, full.cwd, full.timeout_s) == (1.0, "/srv", 30.0)
    assert full == ExecutableJudge(
        command=["{python}", "s.py", "out.json"], continue_threshold=1.0, cwd="/srv", timeout_s=30
    )
    rubric = RubricJudge([{"criterion": "c", "weight": 0.5}], [TranscriptContext()], "m")
    assert rubric == RubricJudge(
        rubric=[{"criterion": "c", "weight": 0.5}], context=[TranscriptContext()], model="m"
    )
    assert RegexJudge(["hi"]) == RegexJudge(patterns=["hi"])
    assert CustomJudge("mine", {"n": 1}) == CustomJudge(name="mine", params={"n": 1})
    step = Step(judge, ["a.txt"])
    assert step == Step(judge=judge, submission_paths=["a.txt"])
    for model in (full, rubric, step, ScoringJob(steps=[step])):
        assert roundtrip(model) == model


def test_positional_parameters_are_validated_and_not_given_twice():
    with pytest.raises(ValidationError, match="continue_threshold"):
        ExecutableJudge(["x", "o"], "high")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="timeout_s"):
        ExecutableJudge(["x", "o"], 0, None, -1)
    with pytest.raises(TypeError, match="multiple values"):
        ExecutableJudge(["x", "o"], command=["y", "o"])  # type: ignore[misc]
    with pytest.raises(ValidationError, match="Extra inputs"):
        ExecutableJudge(["x", "o"], shell=True)
    with pytest.raises(TypeError):
        RegexJudge(["a"], ["b"])  # type: ignore[misc, call-arg]


def test_signatures_name_design_parameters_in_order():
    import inspect

    def positional(model: type) -> list[str]:
        return [
            p.name
            for p in inspect.signature(model).parameters.values()
            if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        ]

    assert positional(ExecutableJudge) == ["command", "continue_threshold", "cwd", "timeout_s"]
    assert positional(RubricJudge) == ["rubric", "context", "model"]
    assert positional(RegexJudge) == ["patterns"]
    assert positional(CustomJudge) == ["name", "params"]
    assert positional(Step) == ["judge", "submission_paths"]


# numbers JSON cannot carry


NON_FINITE = [float("nan"), float("inf"), float("-inf")]


@pytest.mark.parametrize("value", NON_FINITE)
@pytest.mark.parametrize(
    "build",
    [
        lambda v: ExecutableJudge(["x", "o"], v),
        lambda v: ExecutableJudge(["x", "o"], timeout_s=v),
        lambda v: RubricJudge([{"criterion": "c", "weight": v}]),
        lambda v: RubricJudge([{"criterion": "c"}], continue_threshold=v),
        lambda v: CustomJudge("mine", {"expected": [1, {"deep": v}]}),
        lambda v: ScoringJob(judge=AlwaysPassJudge(), metadata={"seed": v}),
        lambda v: ScoringJob(judge=AlwaysPassJudge(), metadata={"runs": [{"loss": v}]}),
        lambda v: ScoringJob(judge=AlwaysPassJudge(), limits={"wall_s": v}),
        lambda v: Transcript(events=[{"type": "tick", "at": v}]),
        lambda v: Message(role="assistant", content=[{"type": "tool_use", "input": {"x": v}}]),
        lambda v: Message(role="assistant", logprob=v),
    ],
)
def test_models_refuse_numbers_json_cannot_carry(build, value):
    with pytest.raises(ValidationError, match="finite"):
        build(value)


@pytest.mark.parametrize(
    "text",
    [
        '{"judge": {"type": "always_pass"}, "metadata": {"x": NaN}}',
        '{"judge": {"type": "executable", "command": ["x", "o"], "continue_threshold": Infinity}}',
        '{"judge": {"type": "always_pass"}, "limits": {"wall_s": Infinity}}',
        '{"judge": {"type": "always_pass"}, "transcript": {"events": [{"type": "t", "v": NaN}]}}',
    ],
)
def test_jobs_read_from_json_refuse_nan_and_infinity(text):
    with pytest.raises(ValidationError, match="finite"):
        ScoringJob.model_validate_json(text)


def test_the_cluster_refuses_such_a_job_before_sending_it():
    from chalk_client.records import prepare_job

    with pytest.raises(chalk_client.InvalidJobError, match="finite"):
        prepare_job({"judge": {"type": "always_pass"}, "metadata": {"x": float("nan")}})


def test_finite_numbers_and_odd_metadata_still_pass():
    loop: dict[str, object] = {}
    loop["self"] = loop
    job = ScoringJob(
        judge=ExecutableJudge(["x", "o"], 1e308),
        metadata={"big": 1e308, "small": -1e-308, "int": 10**30, "loop": loop},
    )
    assert job.metadata["big"] == 1e308


@pytest.mark.parametrize(
    "compare, problem",
    [
        ({"checker": []}, "at least 1 item"),
        ({"float_tolerance": -1}, "greater than or equal to 0"),
        ("tokenz", "'tokens', 'exact' or 'lines'"),
        ({"checkr": ["x"]}, 'compare is "tokens", "exact"'),
        ({"checker": ["c", "{input}"]}, "places all of {input}, {output} and {expected}"),
    ],
)
def test_a_tests_judge_s_compare_is_refused_saying_what_is_wrong(compare, problem):
    with pytest.raises(ValidationError) as caught:
        TestsJudge(tests=[{"stdout": "1"}], compare=compare)
    assert problem in str(caught.value)
    assert len(caught.value.errors()) == 1  # one error, about what was meant


def test_a_tests_judge_survives_json_and_reads_aliases():
    judge = TestsJudge(
        language="C++", tests=[{"input": "1 2", "output": "3"}], compare={"float_tolerance": 1e-6}
    )
    assert judge.language == "cpp" and judge.tests is not None
    assert judge.tests[0].stdin == "1 2" and judge.tests[0].stdout == "3"
    again = TypeAdapter(JudgeSpec).validate_json(judge.model_dump_json())
    assert again == judge
    with pytest.raises(ValidationError, match='either "tests" or "tests_file"'):
        TestsJudge(tests=[{"stdout": "1"}], tests_file="tasks/x/tests.jsonl")
    with pytest.raises(ValidationError, match=re.escape("without '..'")):
        TestsJudge(source="../main.c", tests=[{"stdout": "1"}])


def test_a_content_block_whose_type_is_not_a_string_is_refused_as_invalid():
    # Such a "type" once escaped validation as a TypeError (unhashable) instead.
    for kind in (["text"], {"a": 1}, 3):
        with pytest.raises(ValidationError):
            Message(role="user", content=[{"type": kind, "text": "a"}])
    assert Message(role="user", content=[{"type": "note", "x": 1}]).text_parts() == []
