"""``chalk score`` with awkward files and flags: --out safety, bad bytes, bad numbers, ids.

The command runs in this process (``cli.main``) on the embedded queue, with
judges that need no subprocess, so these tests stay fast.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from chalk_client import JobResult, JobStatus, ScoringJob, cli
from chalk_client.cli import cluster as cluster_cli
from chalk_client.cli.progress import ResultSink
from chalk_client.errors import ConfigurationError
from chalk_client.judges import AlwaysPassJudge, CustomJudge, RegexJudge
from chalk_client.records import prepare_job
from chalk_client.rollouts import stable_id

Run = Callable[..., tuple[int, str, str]]

SAID_HI = {"transcript": {"messages": [{"role": "assistant", "content": "hi"}]}}


@pytest.fixture
def chalk(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Run:
    """``chalk ARGS`` in this process: (exit status, stdout, stderr)."""
    for key in list(os.environ):
        if key.startswith("CHALK_"):
            monkeypatch.delenv(key)

    def run(*args: str | Path) -> tuple[int, str, str]:
        try:
            code = cli.main([str(arg) for arg in args])
        except SystemExit as exc:  # argparse refusing a flag
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    return run


def write_lines(path: Path, lines: Iterable[dict[str, Any] | str | bytes]) -> Path:
    data = b"".join(
        (
            line
            if isinstance(line, bytes)
            else (line if isinstance(line, str) else json.dumps(line)).encode()
        )
        + b"\n"
        for line in lines
    )
    path.write_bytes(data)
    return path


def results_of(path: Path) -> list[JobResult]:
    return [JobResult.model_validate_json(line) for line in path.read_text().splitlines()]


@pytest.fixture
def rollouts(tmp_path: Path) -> Path:
    return write_lines(tmp_path / "rollouts.jsonl", [{"id": "a", **SAID_HI}])


@pytest.fixture
def judge(tmp_path: Path) -> Path:
    path = tmp_path / "judge.json"
    path.write_text(RegexJudge(["hi"]).model_dump_json())
    return path


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# --out never erases what it holds


def test_out_holding_other_data_is_refused_and_left_untouched(chalk, rollouts, judge, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"my precious notes\n")
    code, out, err = chalk("score", rollouts, "--judge", judge, "--out", notes)
    assert code == 2 and out == ""
    assert f"--out {notes}:1 is not a result" in one_line(err)
    assert notes.read_bytes() == b"my precious notes\n"


def test_a_line_that_is_not_a_result_is_named_even_among_results(chalk, rollouts, judge, tmp_path):
    results = tmp_path / "results.jsonl"
    assert chalk("score", rollouts, "--judge", judge, "--out", results)[0] == 0
    with results.open("a") as handle:
        handle.write("a note I added\n")
        handle.write(results.read_text().splitlines()[0] + "\n")
    before = results.read_bytes()
    code, _, err = chalk("score", rollouts, "--judge", judge, "--out", results)
    assert code == 2 and f"{results}:2 is not a result" in one_line(err)
    assert results.read_bytes() == before


def test_a_single_unterminated_line_of_notes_is_not_mistaken_for_a_torn_result(
    chalk, rollouts, judge, tmp_path
):
    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"no newline at the end")
    code, _, err = chalk("score", rollouts, "--judge", judge, "--out", notes)
    assert code == 2 and "is not a result" in err
    assert notes.read_bytes() == b"no newline at the end"


@pytest.mark.parametrize("how", ["same path", "another path", "symlink", "hard link"])
def test_out_naming_the_rollouts_file_is_refused(chalk, rollouts, judge, tmp_path, how):
    before = rollouts.read_bytes()
    out = {
        "same path": rollouts,
        "another path": tmp_path / "." / ".." / tmp_path.name / rollouts.name,
    }.get(how)
    if how == "symlink":
        out = tmp_path / "link.jsonl"
        out.symlink_to(rollouts)
    if how == "hard link":
        out = tmp_path / "hard.jsonl"
        os.link(rollouts, out)
    code, _, err = chalk("score", rollouts, "--judge", judge, "--out", out)
    assert code == 2 and "is the rollouts file" in one_line(err)
    assert rollouts.read_bytes() == before


def test_out_naming_the_judge_file_is_refused(chalk, rollouts, judge):
    before = judge.read_bytes()
    code, _, err = chalk("score", rollouts, "--judge", judge, "--out", judge)
    assert code == 2 and "is the judge file" in one_line(err)
    assert judge.read_bytes() == before


def test_resume_drops_only_a_torn_last_line_and_keeps_earlier_failures(chalk, tmp_path):
    rollouts = write_lines(
        tmp_path / "r.jsonl",
        [
            ScoringJob(id="ok", judge=AlwaysPassJudge()).model_dump_json(),
            ScoringJob(id="broken", judge=CustomJudge("not_registered_anywhere")).model_dump_json(),
        ],
    )
    results = tmp_path / "results.jsonl"
    assert chalk("score", rollouts, "--out", results)[0] == 1
    complete = results.read_bytes()
    results.write_bytes(complete + '{"job_id":"broken","status":"succ\xe9'.encode()[:-1])
    code, _, err = chalk("score", rollouts, "--out", results)
    assert code == 1 and "Skipped 1 job already scored" in err
    assert results.read_bytes().startswith(complete)  # nothing written before was removed
    assert [(r.job_id, r.status) for r in results_of(results)][-1] == ("broken", JobStatus.FAILED)
    assert len(results_of(results)) == 3


def test_a_last_result_without_its_newline_is_kept_whole(chalk, rollouts, judge, tmp_path):
    results = tmp_path / "results.jsonl"
    kept = JobResult(job_id="earlier", status=JobStatus.SUCCEEDED).model_dump_json()
    results.write_text(kept)
    code, _, _ = chalk("score", rollouts, "--judge", judge, "--out", results)
    assert code == 0
    assert [r.job_id for r in results_of(results)] == ["earlier", "a"]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.mkdir(), "is a folder"),
        (
            lambda p: p.write_bytes(b'{"job_id": "x", "status": "succeeded"}\n\xff\xfe\n'),
            ":2 is not UTF-8",
        ),
        (None, "there is no folder"),
    ],
)
def test_unusable_out_files_are_one_line_errors(chalk, rollouts, judge, tmp_path, make, message):
    out = tmp_path / "out.jsonl" if make else tmp_path / "missing" / "out.jsonl"
    if make:
        make(out)
    code, stdout, err = chalk("score", rollouts, "--judge", judge, "--out", out)
    assert code == 2 and stdout == ""
    assert message in one_line(err)
    assert not (tmp_path / "missing").exists()


# numbers on the command line


@pytest.mark.parametrize("value", ["-1", "0", "many", "1.5"])
def test_concurrency_below_one_or_not_a_number_is_refused(chalk, rollouts, judge, value):
    code, out, err = chalk("score", rollouts, "--judge", judge, "--concurrency", value)
    assert code == 2 and out == ""
    assert f"--concurrency: must be a whole number of at least 1, got '{value}'" in err


def test_concurrency_one_scores_everything(chalk, tmp_path, judge):
    rollouts = write_lines(tmp_path / "r.jsonl", [{"id": str(n), **SAID_HI} for n in range(5)])
    code, out, _ = chalk("score", rollouts, "--judge", judge, "--concurrency", "1")
    assert code == 0 and len(out.splitlines()) == 5


def test_score_stream_refuses_a_concurrency_below_one():
    from chalk_worker.run.embedded import score_stream

    async def first() -> None:
        async for _ in score_stream([ScoringJob(id="a", judge=AlwaysPassJudge())], concurrency=0):
            pass

    with pytest.raises(ValueError, match="at least 1"):
        asyncio.run(first())


def test_a_bad_chalk_setting_is_a_one_line_error(chalk, rollouts, judge, monkeypatch):
    monkeypatch.setenv("CHALK_EMBEDDED_CONCURRENCY", "lots")
    code, _, err = chalk("score", rollouts, "--judge", judge)
    assert code == 2 and "CHALK_EMBEDDED_CONCURRENCY" in one_line(err)


# bad bytes and bad numbers in the rollouts


def test_invalid_utf8_is_a_bad_line_with_its_number(chalk, tmp_path, judge):
    rollouts = write_lines(
        tmp_path / "r.jsonl",
        [{"id": "a", **SAID_HI}, b'{"id": "b", "metadata": {"x": "\xff"}}', {"id": "c", **SAID_HI}],
    )
    code, out, err = chalk("score", rollouts, "--judge", judge)
    assert code == 2 and out == ""
    assert f"{rollouts}:2: invalid job: not UTF-8 text (byte 0xff" in err
    code, out, _ = chalk("score", rollouts, "--judge", judge, "--skip-invalid")
    assert code == 0
    results = {r.job_id: r for r in map(JobResult.model_validate_json, out.splitlines())}
    assert sorted(results) == ["a", "b", "c"]  # the bad line keeps its id in its trace
    skipped = [r for r in results.values() if r.status is JobStatus.FAILED]
    assert len(skipped) == 1 and "line 2 of" in (skipped[0].error or "")


@pytest.mark.parametrize(
    "line",
    [
        '{"id": "n", "metadata": {"x": NaN}}',
        '{"id": "n", "metadata": {"x": [1, Infinity]}}',
        '{"id": "n", "limits": {"wall_s": Infinity}}',
        '{"id": "n", "judge": {"type": "rubric", "rubric": [{"criterion": "c", "weight": NaN}]}}',
        '{"id": "n", "transcript": {"events": [{"type": "t", "at": -Infinity}]}}',
    ],
)
def test_nan_and_infinity_make_a_bad_line_with_its_number(chalk, tmp_path, judge, line):
    rollouts = write_lines(tmp_path / "r.jsonl", [{"id": "a", **SAID_HI}, line])
    code, out, err = chalk("score", rollouts, "--judge", judge)
    assert code == 2 and out == ""
    assert f"{rollouts}:2: invalid job: not valid JSON:" in err and "finite" in err
    code, out, _ = chalk("score", rollouts, "--judge", judge, "--skip-invalid")
    results = [JobResult.model_validate_json(x) for x in out.splitlines()]
    # The skipped line is in the output as a failed result under its own id, saying why.
    assert code == 0 and [(r.job_id, r.status) for r in results] == [
        ("n", JobStatus.FAILED),
        ("a", JobStatus.SUCCEEDED),
    ]
    assert "line 2 of" in (results[0].error or "") and "--skip-invalid" in (results[0].error or "")


@pytest.mark.parametrize(
    "line",
    [
        # Found by fuzz.transcript: Python's json reads such escapes, pydantic's (a worker's)
        # does not; the job was scored and writing its result crashed chalk score.
        '{"id": "s", "metadata": {"note": "\\ud800"}}',
        '{"id": "s", "transcript": {"messages": [{"role": "assistant", "content": "\\udfff"}]}}',
        '{"id": "s\\uD83D", "transcript": {}}',
        '{"id": "s", "metadata": {"\\ud83d": 1}}',
    ],
)
def test_a_lone_surrogate_makes_a_bad_line_not_a_crash(chalk, tmp_path, judge, line):
    rollouts = write_lines(tmp_path / "r.jsonl", [{"id": "a", **SAID_HI}, line])
    code, out, err = chalk("score", rollouts, "--judge", judge)
    assert code == 2 and out == ""
    assert f"{rollouts}:2: invalid job: not valid JSON: it escapes a lone surrogate" in err
    code, out, _ = chalk("score", rollouts, "--judge", judge, "--skip-invalid")
    results = [JobResult.model_validate_json(x) for x in out.splitlines()]
    assert code == 0 and [r.status for r in results] == [JobStatus.FAILED, JobStatus.SUCCEEDED]
    # A line keeps its own id, unless that is what holds the surrogate.
    assert results[0].job_id == (stable_id(line) if "uD83D" in line else "s")


def test_a_surrogate_pair_is_one_character_and_scores(chalk, tmp_path, judge):
    said = '{"role": "assistant", "content": "hi \\ud83d\\ude00"}'
    line = f'{{"id": "s", "transcript": {{"messages": [{said}]}}}}'
    code, out, _ = chalk("score", write_lines(tmp_path / "r.jsonl", [line]), "--judge", judge)
    (result,) = [JobResult.model_validate_json(x) for x in out.splitlines()]
    assert code == 0 and result.status is JobStatus.SUCCEEDED and result.score == 1.0


def test_on_the_cluster_nan_lines_are_bad_lines_and_the_rest_is_sent(
    chalk, tmp_path, judge, monkeypatch
):
    sent: list[ScoringJob] = []

    def fake_cluster(
        jobs: Iterable[ScoringJob], sink: ResultSink, *, rescore: bool, priority: str
    ) -> None:
        for job in jobs:
            prepare_job(job)  # what ChalkClient.submit_batch does first: it must not refuse
            sent.append(job)
            sink.write(JobResult(job_id=job.id or "", status=JobStatus.SUCCEEDED))

    monkeypatch.setenv("CHALK_REDIS_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setattr(cluster_cli, "score_on_cluster", fake_cluster)  # imported when used
    rollouts = write_lines(
        tmp_path / "r.jsonl", [{"id": "a", **SAID_HI}, '{"id": "b", "metadata": {"x": NaN}}']
    )
    code, _, err = chalk("score", rollouts, "--judge", judge)
    assert code == 2 and f"{rollouts}:2: invalid job" in err and sent == []
    code, _, _ = chalk("score", rollouts, "--judge", judge, "--skip-invalid")
    assert code == 0 and [job.id for job in sent] == ["a"]


# the judge file


@pytest.mark.parametrize(
    ("text", "held"),
    [
        ("[]", "its steps are []"),
        ('{"steps": []}', "its steps are []"),
        ("{}", 'an object without a "type"'),
        ('{"patterns": ["hi"]}', 'an object without a "type"'),
        ("42", "it holds 42"),
        ('"regex"', 'it holds "regex"'),
        ("null", "it holds null"),
    ],
)
def test_a_judge_file_that_holds_no_judge_is_refused_up_front(
    chalk, rollouts, tmp_path, text, held
):
    path = tmp_path / "judge.json"
    path.write_text(text)
    code, out, err = chalk("score", rollouts, "--judge", path)
    line = one_line(err)
    assert code == 2 and out == ""
    assert f'the judge file {path} must hold one judge (a JSON object with a "type"' in line
    assert held in line


def test_an_invalid_judge_file_is_a_one_line_error(chalk, rollouts, tmp_path):
    path = tmp_path / "judge.json"
    path.write_text('{"type": "executable", "command": ["x", "out"], "continue_threshold": NaN}')
    code, _, err = chalk("score", rollouts, "--judge", path)
    assert code == 2 and "could not read the judge file" in one_line(err) and "NaN" in err
    path.write_text('{"type": "regex", "patterns": ["("]}')
    code, _, err = chalk("score", rollouts, "--judge", path)
    assert code == 2 and "is not a valid judge: regex.patterns.0" in one_line(err)
    path.write_bytes(b'{"type": "regex", "patterns": ["\xff"]}')
    code, _, err = chalk("score", rollouts, "--judge", path)
    assert code == 2 and "could not read the judge file" in one_line(err)
    path.write_text('{"type": "regex", "patterns": ["\\ud800"]}')
    code, _, err = chalk("score", rollouts, "--judge", path)
    assert code == 2 and "could not read the judge file" in one_line(err)
    assert "lone surrogate" in err


def test_a_list_of_steps_is_still_a_judge_file(chalk, rollouts, tmp_path):
    path = tmp_path / "steps.json"
    path.write_text(
        json.dumps(
            [{"judge": {"type": "always_pass"}}, {"judge": {"type": "regex", "patterns": ["hi"]}}]
        )
    )
    code, out, _ = chalk("score", rollouts, "--judge", path)
    assert code == 0 and len(JobResult.model_validate_json(out).steps) == 2


# ids derived for lines without one


def ids_scored(chalk: Run, rollouts: Path, judge: Path | None = None) -> list[str]:
    args = ["score", rollouts] + (["--judge", judge] if judge else [])
    code, out, err = chalk(*args)
    assert code == 0, err
    return [JobResult.model_validate_json(line).job_id for line in out.splitlines()]


def test_a_derived_id_depends_on_the_judge_from_the_judge_file(chalk, tmp_path):
    rollouts = write_lines(tmp_path / "r.jsonl", [SAID_HI])
    first, second, same = (tmp_path / f"{name}.json" for name in ("first", "second", "same"))
    first.write_text(json.dumps({"type": "regex", "patterns": ["hi"]}))
    second.write_text(json.dumps({"type": "regex", "patterns": ["bye"]}))
    same.write_text('{ "patterns" : [ "hi" ],\n  "type": "regex" }')  # the first, written otherwise
    ids = [ids_scored(chalk, rollouts, judge)[0] for judge in (first, second, same)]
    assert ids[0] != ids[1] and ids[0] == ids[2]
    assert ids[0] != stable_id(json.dumps(SAID_HI))


def test_lines_with_their_own_judge_or_id_keep_their_ids(chalk, tmp_path, judge):
    own_judge = json.dumps({**SAID_HI, "judge": {"type": "always_pass"}})
    rollouts = write_lines(tmp_path / "r.jsonl", [own_judge, {"id": "mine", **SAID_HI}])
    assert sorted(ids_scored(chalk, rollouts, judge)) == sorted([stable_id(own_judge), "mine"])


def test_a_new_judge_file_scores_again_into_the_same_out(chalk, tmp_path):
    rollouts = write_lines(tmp_path / "r.jsonl", [SAID_HI])
    results = tmp_path / "results.jsonl"
    for patterns in (["hi"], ["bye"]):
        judge = tmp_path / "judge.json"
        judge.write_text(json.dumps({"type": "regex", "patterns": patterns}))
        assert chalk("score", rollouts, "--judge", judge, "--out", results)[0] == 0
    assert [r.score for r in results_of(results)] == [1.0, 0.0]


# errors of the library, printed by the command


def test_configuration_errors_are_one_line_and_exit_2(chalk, rollouts, judge, monkeypatch):
    def refuse(*args: object, **kwargs: object) -> None:
        raise ConfigurationError("the cluster refuses;\nsay what to do")

    monkeypatch.setenv("CHALK_REDIS_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setattr(cluster_cli, "ChalkClient", refuse)
    for args in (("score", rollouts, "--judge", judge), ("status",), ("status", "job-1")):
        code, _, err = chalk(*args)
        assert (
            code == 2 and one_line(err) == f"chalk {args[0]}: the cluster refuses; say what to do"
        )


@pytest.mark.parametrize("command", ["worker", "flower", "status", "health", "score"])
def test_a_malformed_redis_url_is_a_one_line_error(chalk, rollouts, judge, monkeypatch, command):
    monkeypatch.setenv("CHALK_REDIS_URL", "redis://:secret@host:port/0")
    args = ("score", rollouts, "--judge", judge) if command == "score" else (command,)
    code, _, err = chalk(*args)
    line = one_line(err)
    assert code == 2 and line.startswith(f"chalk {command}: ") and "secret" not in line


# choosing what to score: --limit, --only, --rescore


@pytest.fixture
def five(tmp_path: Path) -> Path:
    """Five jobs, ids j1..j5, each saying its own number."""
    lines = [
        {"id": f"j{n}", "transcript": {"messages": [{"role": "assistant", "content": f"n={n}"}]}}
        for n in range(1, 6)
    ]
    return write_lines(tmp_path / "five.jsonl", lines)


def ids_of(path: Path) -> list[str]:
    return [result.job_id for result in results_of(path)]


def test_limit_scores_the_next_n_jobs_still_to_score(chalk, five, judge, tmp_path):
    out = tmp_path / "out.jsonl"
    code, _, err = chalk("score", five, "--judge", judge, "--out", out, "--limit", "2")
    assert code == 0 and sorted(ids_of(out)) == ["j1", "j2"]
    assert "Scored 2 jobs" in err
    code, _, err = chalk("score", five, "--judge", judge, "--out", out, "--limit", "2")
    assert code == 0 and sorted(ids_of(out)) == ["j1", "j2", "j3", "j4"]
    assert "Skipped 2 jobs already scored" in err
    code, _, _ = chalk("score", five, "--judge", judge, "--out", out, "--limit", "0")
    assert code == 2  # at least 1


def test_only_scores_the_jobs_named(chalk, five, judge, tmp_path):
    out = tmp_path / "out.jsonl"
    code, _, _ = chalk(
        "score", five, "--judge", judge, "--out", out, "--only", "j4,j2", "--only", "j5"
    )
    assert code == 0 and sorted(ids_of(out)) == ["j2", "j4", "j5"]
    code, _, err = chalk("score", five, "--judge", judge, "--out", out, "--only", "j1,nope,j9")
    assert code == 2 and sorted(ids_of(out)) == ["j2", "j4", "j5"]  # nothing scored
    assert "--only names 2 id(s)" in err and "j9" in err and "nope" in err


def test_rescore_scores_again_what_out_holds_and_appends(chalk, five, judge, tmp_path):
    out = tmp_path / "out.jsonl"
    assert chalk("score", five, "--judge", judge, "--out", out, "--only", "j1,j2")[0] == 0
    before = out.read_text()
    code, _, err = chalk("score", five, "--judge", judge, "--out", out, "--only", "j1,j2")
    assert code == 0 and out.read_text() == before  # skipped, and the summary says how to redo
    assert "Skipped 2 jobs already scored" in err and "--rescore" in err
    code, _, err = chalk(
        "score", five, "--judge", judge, "--out", out, "--only", "j1,j2", "--rescore"
    )
    assert code == 0 and "Scored 2 jobs" in err
    assert out.read_text().startswith(before) and sorted(ids_of(out)) == ["j1", "j1", "j2", "j2"]
    assert "(all runs): 2 jobs, 2 succeeded" in err  # the last line per id counts once


def test_the_progress_line_counts_grader_errors():
    from chalk_client.cli.progress import Tally
    from chalk_client.scoring import Scoring, ZeroCause

    tally = Tally(total=3)
    crash = Scoring.fail("error", "the script exited with status 1", cause=ZeroCause.GRADER_ERROR)
    tally.add(JobResult(job_id="x", status=JobStatus.SUCCEEDED, scoring=crash, steps=[crash]))
    tally.add(JobResult(job_id="y", status=JobStatus.SUCCEEDED, scoring=Scoring(score=1)))
    assert tally.line().startswith("2/3 scored, 0 failed, 1 grader error, mean score 0.500")
    assert tally.first_grader_error == ("x", "the script exited with status 1")
