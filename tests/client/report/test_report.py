"""``chalk report``: the numbers it computes, the files it writes, and the page in a real browser.

The browser test opens the report in headless Chromium (over the DevTools
protocol) and checks what a reader relies on: the page opens from disk with no
network, the histogram is drawn, typing in the filter and choosing a cause or a
status narrows the table, a click opens a job's reasons and output, and a
hostile student output is shown as text, never run.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from browser import Chromium

from chalk_client import CompileResult, JobResult, JobStatus, Scoring, TestResult, Verdict
from chalk_client.report import analyze, read_results_file
from chalk_client.report.stats import histogram, mean_ci, percentile, t_975
from chalk_client.scoring import ZeroCause

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "tasks" / "example_task"
HOSTILE = '</script><script>document.title="pwned"</script><img src=x onerror="document.title=1">'


def chalk(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHALK_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "chalk_client.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )


def rubric_step(met: list[bool]) -> Scoring:
    metadata = {}
    for n, yes in enumerate(met, start=1):
        metadata[f"criterion_{n}"] = ("YES" if yes else "NO") + ": because"
        metadata[f"criterion_{n}_text"] = f"criterion {n}"
    metadata["rubric_prompt_tokens"] = "100"
    metadata["rubric_completion_tokens"] = "10"
    score = float(sum(met)) / len(met)
    cause = ZeroCause.UNMET_CRITERIA if score == 0 else None
    return Scoring(score=score, metadata=metadata, cause=cause)


def demo_results() -> list[JobResult]:
    """60 jobs of two policies: passes, script zeros, grader errors, rubric verdicts, failures."""
    results = []
    for n in range(60):
        policy = "baseline" if n % 2 else "tuned"
        timings = {"collect": 0.001 * n, "judge": 0.01 * n, "total": 0.011 * n + 0.01}
        meta = {"policy": policy, "seed": n}
        if n % 10 == 3:
            crash = Scoring.fail(
                "error",
                "the script exited with status 1",
                cause=ZeroCause.GRADER_ERROR,
                stdout="",
                stderr="Traceback (most recent call last):\nModuleNotFoundError: grade_me",
            )
            steps = [crash]
        elif n % 10 == 7:
            results.append(
                JobResult(
                    job_id=f"job-{n:03d}",
                    status=JobStatus.FAILED,
                    error="rubric grading missed its deadline",
                    attempts=1,
                    timings=timings,
                    metadata=meta,
                )
            )
            continue
        elif n % 3 == 0:
            zero = Scoring(
                score=0,
                metadata={"stdout": HOSTILE if n == 0 else "wrong", "stderr": ""},
                cause=ZeroCause.SCRIPT_ZERO,
            )
            steps = [zero]
        else:
            passed = Scoring(score=1, metadata={"stdout": "ok", "stderr": ""})
            steps = [passed, rubric_step([n % 2 == 0, True])]
        results.append(
            JobResult(
                job_id=f"job-{n:03d}",
                status=JobStatus.SUCCEEDED,
                scoring=steps[-1],
                steps=steps,
                attempts=1,
                timings=timings,
                worker="host:1",
                metadata=meta,
            )
        )
    return results


@pytest.fixture
def results_file(tmp_path: Path) -> Path:
    path = tmp_path / "results.jsonl"
    lines = [result.model_dump_json() for result in demo_results()]
    # A job scored again later: its last line is its result.
    again = Scoring(score=0.25)
    redo = JobResult(
        job_id="job-001",
        status=JobStatus.SUCCEEDED,
        scoring=again,
        steps=[again],
        metadata={"policy": "baseline", "seed": 1},
    )
    path.write_text("\n".join([*lines, redo.model_dump_json()]) + "\n")
    return path


# the numbers


def test_the_mean_of_pass_fail_scores_gets_wilson_s_interval():
    ci = mean_ci([1.0] * 8 + [0.0] * 2)
    assert ci is not None and ci.method == "Wilson" and ci.mean == 0.8
    # Wilson's 95% interval for 8 of 10 (as printed in textbooks): 0.490 to 0.943.
    assert round(ci.low, 3) == 0.490 and round(ci.high, 3) == 0.943


def test_the_mean_of_other_scores_gets_student_s_t_interval():
    ci = mean_ci([0.2, 0.4, 0.6, 0.8])
    assert ci is not None and ci.method == "t"
    half = 3.182 * math.sqrt(((0.3**2 + 0.1**2) * 2 / 3) / 4)
    assert ci.low == pytest.approx(0.5 - half) and ci.high == pytest.approx(0.5 + half)
    assert t_975(35) == pytest.approx(2.030, abs=0.001)  # between the table's 30 and 40
    assert t_975(1000) == pytest.approx(1.962, abs=0.001)
    assert mean_ci([]) is None and mean_ci([0.5]).method == "none"


def test_few_distinct_scores_get_a_bar_each_many_get_bins():
    bars = histogram([0.0, 1.0, 1.0, 0.5])
    assert [(b.label, b.count) for b in bars] == [("0", 1), ("0.5", 1), ("1", 2)]
    bins = histogram([n / 100 for n in range(101)])
    assert len(bins) == 20 and sum(b.count for b in bins) == 101
    assert bins[-1].label.endswith("1]") and bins[0].label.startswith("[0,")


def test_percentiles_interpolate_between_ranks():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5], 99) == 5
    assert percentile(list(range(101)), 90) == 90


def test_analysis_counts_causes_steps_criteria_groups_and_tokens(results_file):
    loaded = read_results_file(results_file)
    assert len(loaded.results) == 60  # the repeated id counts once, with its last line
    report = analyze(loaded.results, source="x", by="policy")
    assert report.statuses == {"succeeded": 54, "failed": 6}
    assert report.zeros["grader_error"] == 6 and report.grader_errors == 6
    assert report.first_grader_error == ("job-003", "the script exited with status 1")
    scored_zero = [r for r in loaded.results if r.status is JobStatus.SUCCEEDED and r.score == 0]
    assert sum(report.zeros.values()) == len(scored_zero)
    assert report.steps[0].reached == 54 and report.steps[1].reached == report.criteria[1].graded
    by_text = {c.text: c for c in report.criteria}
    assert by_text["criterion 2"].yes == by_text["criterion 2"].graded  # always met
    assert {g.value for g in report.groups} == {"baseline", "tuned"}
    assert sum(g.jobs for g in report.groups) == 60
    assert report.tokens.prompt == 100 * by_text["criterion 1"].graded
    assert [t.name for t in report.timings] == ["total", "judge", "collect"]
    assert report.failures == {"rubric grading missed its deadline": 6}


# the command and its files


def test_report_writes_html_and_a_csv_pandas_can_read(results_file, tmp_path):
    out, table = tmp_path / "r.html", tmp_path / "r.csv"
    run = chalk("report", results_file, "--out", out, "--csv", table, "--by", "policy")
    assert run.returncode == 0, run.stderr
    assert "60 jobs" in run.stderr and "6 grader errors" in run.stderr
    html = out.read_text()
    # Self-contained: nothing fetched, no script or style from elsewhere, a CSP forbidding it.
    assert "default-src 'none'" in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html)
    assert "<link" not in html and "@import" not in html
    # The hostile output cannot close the data's script element.
    assert HOSTILE not in html and "\\u003c/script>" in html
    with table.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 60
    first = rows[0]
    assert first["job_id"] == "job-000" and first["cause"] == "script_zero"
    assert first["metadata.policy"] == "tuned" and first["metadata.seed"] == "0"
    assert rows[3]["grader_error"] == "True" and rows[7]["status"] == "failed"
    assert float(rows[1]["score"]) == 0.25  # the last line for job-001
    assert "step_2_score" in first and "seconds_total" in first


def test_report_of_a_real_run(tmp_path):
    results = tmp_path / "results.jsonl"
    run = chalk(
        "score", EXAMPLE / "rollouts.jsonl", "--judge", EXAMPLE / "judge.json", "--out", results
    )
    assert run.returncode == 0, run.stderr
    run = chalk("report", results)
    assert run.returncode == 0, run.stderr
    html = results.with_suffix(".html").read_text()
    assert "rollout-003" in html and "script_zero" in html
    assert re.search(r'id="mean">0\.5000 \(95% CI [0-9.]+ to [0-9.]+, n=4, Wilson\)', html)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "give chalk report a results file"),
        (("missing.jsonl",), "no results file at"),
        (("rollouts",), "is not a result of chalk score"),
        (("--batch", "b-1"), "set CHALK_REDIS_URL"),
    ],
)
def test_report_errors_say_what_to_do(tmp_path, args, message):
    rollouts = tmp_path / "rollouts"
    rollouts.write_text('{"id": "a", "judge": {"type": "always_pass"}}\n')
    run = chalk("report", *[str(rollouts) if a == "rollouts" else a for a in args], cwd=tmp_path)
    assert run.returncode == 2 and message in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


# the page, in a real browser


@pytest.fixture
def browser(tmp_path: Path):
    with Chromium(tmp_path / "profile", tmp_path / "chromium.log") as chromium:
        yield chromium


def rows_shown(browser: Chromium) -> int:
    return int(browser.evaluate("document.querySelectorAll('#results-body tr.result').length"))


def matching(browser: Chromium) -> int:
    return int(browser.evaluate("document.getElementById('shown').dataset.matching"))


def type_filter(browser: Chromium, element: str, value: str) -> None:
    event = "input" if element == "filter-text" else "change"
    browser.evaluate(
        f"(() => {{ const e = document.getElementById({json.dumps(element)}); "
        f"e.value = {json.dumps(value)}; e.dispatchEvent(new Event({json.dumps(event)})); }})()"
    )


@pytest.mark.slow
def test_the_page_in_a_real_browser(results_file, tmp_path, browser):
    out = tmp_path / "report.html"
    assert chalk("report", results_file, "--out", out, "--by", "policy").returncode == 0
    browser.open(out.as_uri())
    browser.wait_for("document.body.dataset.ready === 'true'")
    title = browser.evaluate("document.title")
    assert title.startswith("Chalk report")

    # The histogram is drawn: a bar per distinct score, as tall as its count says.
    bars = browser.evaluate(
        "[...document.querySelectorAll('svg.histogram rect.bar')].map(r => "
        "({count: +r.dataset.count, label: r.dataset.label, h: r.getBoundingClientRect().height}))"
    )
    assert [b["label"] for b in bars] == ["0", "0.25", "0.5", "1"]
    assert sum(b["count"] for b in bars) == 54
    tallest = max(bars, key=lambda b: b["count"])
    assert all(b["h"] > 0 for b in bars) and tallest["h"] > 100
    assert all(b["h"] <= tallest["h"] for b in bars)

    # Filtering: every job at first, then what the text, the cause and the status keep.
    assert rows_shown(browser) == 60 and matching(browser) == 60
    type_filter(browser, "filter-text", "job-042")
    assert rows_shown(browser) == 1
    type_filter(browser, "filter-text", "")
    type_filter(browser, "filter-cause", "grader_error")
    assert matching(browser) == 6
    assert browser.evaluate("location.hash") == "#cause=grader_error"  # a link to this view
    type_filter(browser, "filter-group", "baseline")
    assert matching(browser) == 6  # n % 10 == 3: all odd, all baseline
    type_filter(browser, "filter-group", "")
    type_filter(browser, "filter-cause", "")
    type_filter(browser, "filter-status", "failed")
    assert matching(browser) == 6
    type_filter(browser, "filter-status", "")
    type_filter(browser, "filter-text", "modulenotfounderror")  # in the grader errors' stderr
    assert matching(browser) == 6

    # A click opens the job: its reasons, its output, its metadata.
    type_filter(browser, "filter-text", "job-003")
    browser.evaluate("document.querySelector('#results-body tr.result').click()")
    detail = browser.evaluate("document.querySelector('tr.detail').innerText")
    assert "the script exited with status 1" in detail and "ModuleNotFoundError" in detail
    assert '"policy": "baseline"' in detail and "grader_error" in detail

    # The hostile output is shown as text: nothing of it ran, no element was made of it.
    type_filter(browser, "filter-text", "job-000")
    browser.evaluate("document.querySelector('#results-body tr.result').click()")
    shown = browser.evaluate("document.querySelector('tr.detail pre').textContent")
    assert shown == HOSTILE
    assert browser.evaluate("document.title") == title
    assert (
        browser.evaluate("document.querySelectorAll('tr.detail img, tr.detail script').length") == 0
    )

    # Opened with a filter in its address, the page shows that view.
    browser.open(out.as_uri() + "#status=failed")
    browser.wait_for("document.body.dataset.ready === 'true'")
    assert (
        matching(browser) == 6
        and browser.evaluate("document.getElementById('filter-status').value") == "failed"
    )


# the tests judge's results


def judged_programs() -> list[JobResult]:
    """Results of tests judges: a C++ job with a wrong answer and a timeout, a Java one that
    did not compile."""
    cpp_tests = [
        TestResult(verdict=Verdict.ACCEPTED, cpu_s=0.01, wall_s=0.02, memory_mb=1.5, exit_code=0),
        TestResult(
            verdict=Verdict.WRONG_ANSWER,
            cpu_s=0.01,
            wall_s=0.02,
            memory_mb=1.5,
            exit_code=0,
            detail="token 1: got '4', expected '3'",
        ),
        TestResult(verdict=Verdict.TIME_LIMIT, cpu_s=1.0, wall_s=1.1, exit_code=-24, retried=True),
    ]
    cpp = Scoring(
        score=1 / 3,
        metadata={"language": "cpp", "passed": "1/3"},
        continue_task=False,
        tests=cpp_tests,
        compile=CompileResult(ok=True, seconds=0.8),
    )
    java = Scoring(
        score=0.0,
        metadata={"language": "java", "passed": "0/2"},
        continue_task=False,
        cause=ZeroCause.COMPILE_ERROR,
        tests=[TestResult(verdict=Verdict.COMPILE_ERROR)] * 2,
        compile=CompileResult(ok=False, seconds=0.5, stderr="Main.java:1: error: ';' expected"),
    )
    return [
        JobResult(job_id=job_id, status=JobStatus.SUCCEEDED, scoring=scoring, steps=[scoring])
        for job_id, scoring in (("cpp-1", cpp), ("java-1", java))
    ]


def test_the_report_counts_test_verdicts_by_language_and_the_csv_lists_them(tmp_path):
    results = tmp_path / "results.jsonl"
    results.write_text("".join(r.model_dump_json() + "\n" for r in judged_programs()))
    report = analyze(read_results_file(results).results, source="results.jsonl")
    assert report.tests["cpp"].jobs == 1 and report.tests["cpp"].tests == 3
    assert report.tests["cpp"].verdicts == {"AC": 1, "WA": 1, "TLE": 1}
    assert report.tests["java"].verdicts == {"CE": 2}
    out, table = tmp_path / "report.html", tmp_path / "results.csv"
    assert chalk("report", results, "--out", out, "--csv", table).returncode == 0
    page = out.read_text()
    assert "<h2>Test cases</h2>" in page and "compile error: the program did not build" in page
    with table.open() as lines:
        rows = {row["job_id"]: row for row in csv.DictReader(lines)}
    assert rows["cpp-1"]["step_1_verdicts"] == "AC WA TLE"
    assert rows["java-1"]["step_1_verdicts"] == "CE CE"


@pytest.mark.slow
def test_a_job_opened_in_the_browser_lists_its_tests_and_compile(tmp_path, browser):
    results = tmp_path / "results.jsonl"
    results.write_text("".join(r.model_dump_json() + "\n" for r in judged_programs()))
    out = tmp_path / "report.html"
    assert chalk("report", results, "--out", out).returncode == 0
    browser.open(out.as_uri())
    browser.wait_for("document.body.dataset.ready === 'true'")
    type_filter(browser, "filter-text", "cpp-1")
    browser.evaluate("document.querySelector('#results-body tr.result').click()")
    cells = browser.evaluate(
        "[...document.querySelectorAll('tr.detail table.tests tr')].map(r => r.innerText)"
    )
    assert len(cells) == 4  # the header and three tests
    assert "WA" in cells[2] and "token 1: got '4', expected '3'" in cells[2]
    assert "TLE" in cells[3] and "(ran twice)" in cells[3]
    detail = browser.evaluate("document.querySelector('tr.detail').innerText")
    assert "Compile: ok, 0.800 s" in detail and "Tests: 3" in detail
    type_filter(browser, "filter-text", "java-1")
    browser.evaluate("document.querySelector('#results-body tr.result').click()")
    detail = browser.evaluate("document.querySelector('tr.detail').innerText")
    assert "Compile: failed" in detail and "';' expected" in detail
