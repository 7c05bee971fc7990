"""The report's sections, each a function of the ``Report`` returning its HTML.

Every text from the results is escaped here; numbers are formatted here.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from chalk_client.report.analysis import CAUSE_TEXT, QUANTILES, Report
from chalk_client.report.charts import Bar, bars_svg, histogram_svg, intervals_svg
from chalk_client.scoring import Verdict
from chalk_client.usage import format_cost

STATUS_ORDER = ("succeeded", "failed", "running", "queued", "unknown")


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def _card(label: str, big: str, small: str = "", kind: str = "") -> str:
    return (
        f'<div class="card {kind}"><div class="label">{escape(label)}</div>'
        f'<div class="big">{escape(big)}</div><div class="small">{escape(small)}</div></div>'
    )


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], numeric: set[int]) -> str:
    """A table of already-escaped cells; columns in ``numeric`` are right-aligned."""
    cells = "".join(
        f'<th class="{"num" if i in numeric else ""}">{h}</th>' for i, h in enumerate(head)
    )
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="{"num" if i in numeric else ""}">{c}</td>' for i, c in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{cells}</tr></thead><tbody>{body}</tbody></table>"


def cards(report: Report) -> str:
    """The headline numbers, one card each."""
    done = report.statuses["succeeded"] + report.statuses["failed"]
    waiting = report.jobs - done
    cards = [
        _card("jobs", f"{report.jobs:,}", f"{waiting:,} without a result yet" if waiting else ""),
        _card(
            "succeeded",
            f"{report.statuses['succeeded']:,}",
            _share(report.statuses["succeeded"], report.jobs),
        ),
        _card(
            "failed",
            f"{report.statuses['failed']:,}",
            "the system could not score",
            "bad" if report.statuses["failed"] else "",
        ),
    ]
    if report.mean is not None:
        ci = report.mean
        interval = "" if ci.method == "none" else f"95% CI {ci.low:.3f} to {ci.high:.3f}"
        cards.append(_card("mean score", f"{ci.mean:.4f}", interval))
    zeros = sum(report.zeros.values())
    cards.append(
        _card("zeros", f"{zeros:,}", _share(zeros, report.statuses["succeeded"]) + " of scored")
    )
    cards.append(
        _card(
            "grader errors",
            f"{report.grader_errors:,}",
            "zeros that are the grader's fault",
            "bad" if report.grader_errors else "",
        )
    )
    if report.tokens.total:
        cost = "" if report.cost is None else f"est. {format_cost(report.cost)}"
        cards.append(_card("LLM tokens", f"{report.tokens.total:,}", cost))
    return f'<div class="cards">{"".join(cards)}</div>'


def warning(report: Report) -> str:
    """The grader-error warning, with the first message (empty without grader errors)."""
    if report.first_grader_error is None:
        return ""
    job_id, message = report.first_grader_error
    return (
        '<div class="warning" id="grader-warning">'
        f"<strong>{report.grader_errors:,} job(s) scored 0 because the grader failed</strong>"
        " (a scoring script that could not start, crashed or "
        "wrote no valid output): these zeros say nothing of the student. First, "
        f"<code>{escape(job_id)}</code>: {escape(message)}. "
        '<a data-cause="grader_error" href="#results">Show them</a>.</div>'
    )


def statuses(report: Report) -> str:
    """Jobs by status, as bars."""
    names = [s for s in STATUS_ORDER if report.statuses[s]] + sorted(
        s for s in report.statuses if s not in STATUS_ORDER and report.statuses[s]
    )
    tallest = max((report.statuses[s] for s in names), default=1)
    bars = [
        Bar(
            s,
            report.statuses[s] / tallest,
            f"{report.statuses[s]:,} ({_share(report.statuses[s], report.jobs)})",
            s,
        )
        for s in names
    ]
    return "<h2>Jobs by status</h2>" + bars_svg(bars)


def scores(report: Report) -> str:
    """The mean with its interval, and the histogram of scores."""
    if not report.scores:
        return '<h2>Scores</h2><p class="empty">No job has a score yet.</p>'
    ci = report.mean
    assert ci is not None
    return (
        "<h2>Scores</h2>"
        f"<p>Mean score of the {ci.n:,} scored jobs: "
        f'<strong id="mean">{escape(ci.describe())}</strong>. '
        '<span class="note">95% confidence interval: Wilson\'s when every score is 0 or 1, '
        "else Student's t.</span></p>" + histogram_svg(report.bins)
    )


def zeros(report: Report) -> str:
    """Zeros by cause: bars, and a table with each cause's meaning and an example."""
    total = sum(report.zeros.values())
    if not total:
        return '<h2>Zeros by cause</h2><p class="empty">No zeros.</p>'
    ordered = report.zeros.most_common()
    tallest = ordered[0][1]
    bars = [
        Bar(cause, count / tallest, f"{count:,} ({_share(count, total)})", cause)
        for cause, count in ordered
    ]
    rows = [
        [
            f'<a data-cause="{escape(cause)}" href="#results">{escape(cause)}</a>',
            f"{count:,}",
            _share(count, total),
            escape(CAUSE_TEXT.get(cause, "")),
            f"<code>{escape(report.cause_examples.get(cause, ''))}</code>",
        ]
        for cause, count in ordered
    ]
    return (
        "<h2>Zeros by cause</h2>"
        f"<p>{total:,} scored job(s) got 0 (or a failure verdict). The score is the reference's; "
        "the cause says whose doing it was.</p>"
        + bars_svg(bars)
        + _table(["cause", "jobs", "share", "meaning", "e.g."], rows, {1, 2})
    )


def steps(report: Report) -> str:
    """Per step, rubric criterion and missed regex pattern (empty for one plain step)."""
    if len(report.steps) < 2 and not report.criteria and not report.patterns:
        return ""
    parts = []
    if report.steps:
        rows = [
            [
                str(step.number),
                f"{step.reached:,}",
                f"{step.passed:,}",
                _share(step.passed, step.reached),
                "-"
                if step.mean is None
                else escape(f"{step.mean.mean:.4f} [{step.mean.low:.3f}, {step.mean.high:.3f}]"),
                f"{step.zeros:,}",
            ]
            for step in report.steps
        ]
        parts.append(
            '<h2>Steps</h2><p class="note">A step passes when its verdict continues the task; '
            "a job stops at its first step that does not.</p>"
            + _table(
                ["step", "reached", "passed", "pass rate", "mean score [95% CI]", "zeros"],
                rows,
                {1, 2, 3, 5},
            )
        )
    if report.criteria:
        bars = [
            Bar(
                f"{c.step}.{c.number} {c.text[:40]}",
                c.yes / c.graded if c.graded else 0.0,
                _share(c.yes, c.graded),
            )
            for c in report.criteria
        ]
        rows = [
            [
                str(c.step),
                str(c.number),
                escape(c.text),
                f"{c.yes:,}",
                f"{c.no:,}",
                f"{c.unscored:,}",
                _share(c.yes, c.graded),
            ]
            for c in report.criteria
        ]
        parts.append(
            "<h2>Rubric criteria</h2>"
            + bars_svg(bars)
            + _table(
                ["step", "#", "criterion", "YES", "NO", "unscored", "pass rate"], rows, {3, 4, 5, 6}
            )
        )
    if report.patterns:
        rows = [[f"<code>{escape(p)}</code>", f"{n:,}"] for p, n in report.patterns.most_common(30)]
        parts.append(
            "<h2>Regex patterns missed</h2>" + _table(["pattern", "jobs missing it"], rows, {1})
        )
    return "".join(parts)


def tests(report: Report) -> str:
    """The ``tests`` judges' test cases by language and verdict (empty without them)."""
    if not report.tests:
        return ""
    order = [verdict.value for verdict in Verdict]
    rows = [
        [
            escape(language),
            f"{tally.jobs:,}",
            f"{tally.tests:,}",
            *(f"{tally.verdicts[v]:,}" for v in order),
            _share(tally.verdicts["AC"], tally.tests),
        ]
        for language, tally in report.tests.items()
    ]
    return (
        '<h2>Test cases</h2><p class="note">Every test of the tests judges, by the language of '
        "the program and its verdict: AC accepted, WA wrong answer, PE presentation error, TLE "
        "time limit (CPU time), MLE memory limit, RE runtime error, OLE output limit, CE did "
        "not compile, SKIPPED after a failure. A job's own tests are in its row below.</p>"
        + _table(
            ["language", "jobs", "tests", *order, "accepted"],
            rows,
            set(range(1, len(order) + 4)),
        )
    )


def failures(report: Report) -> str:
    """Failed jobs by error (empty without failures)."""
    if not report.failures:
        return ""
    rows = [[escape(error), f"{count:,}"] for error, count in report.failures.most_common(20)]
    return (
        '<h2>Failures</h2><p class="note">Jobs the system could not score (no verdict), by '
        "error.</p>" + _table(["error", "jobs"], rows, {1})
    )


def groups(report: Report) -> str:
    """The ``--by`` groups: their means on one axis, and a table (empty without ``--by``)."""
    if not report.by:
        return ""
    rows = [
        [
            escape(g.value),
            f"{g.jobs:,}",
            f"{g.succeeded:,}",
            f"{g.failed:,}",
            "-"
            if g.mean is None
            else escape(f"{g.mean.mean:.4f} [{g.mean.low:.3f}, {g.mean.high:.3f}]"),
            f"{g.zeros:,}",
            f"{g.grader_errors:,}",
            f"{g.tokens.total:,}",
        ]
        for g in report.groups
    ]
    intervals = [(g.value, g.mean) for g in report.groups if g.mean is not None]
    return (
        f"<h2>By {escape(report.by)}</h2>"
        + intervals_svg(intervals)
        + _table(
            [
                escape(report.by),
                "jobs",
                "succeeded",
                "failed",
                "mean score [95% CI]",
                "zeros",
                "grader errors",
                "LLM tokens",
            ],
            rows,
            {1, 2, 3, 5, 6, 7},
        )
    )


def usage(report: Report) -> str:
    """LLM tokens and their estimated cost."""
    scored = report.statuses["succeeded"] + report.statuses["failed"]
    if not report.tokens.total:
        return (
            "<h2>LLM tokens and cost</h2>"
            '<p class="empty">No LLM tokens recorded (no rubric judge).</p>'
        )
    per_job = report.tokens.total / scored if scored else 0
    cost = (
        f"Estimated cost: <strong>{format_cost(report.cost)}</strong>."
        if report.cost is not None
        else "No cost estimate: set CHALK_LLM_PROMPT_PRICE_PER_MTOK and "
        "CHALK_LLM_COMPLETION_PRICE_PER_MTOK (USD per million tokens) where chalk report runs."
    )
    return (
        "<h2>LLM tokens and cost</h2>"
        f"<p>{report.tokens.prompt:,} prompt + {report.tokens.completion:,} completion tokens "
        f"({per_job:,.0f} per job). {cost}</p>"
    )


def timing(report: Report) -> str:
    """Percentiles of each timing."""
    if not report.timings:
        return ""
    rows = [
        [
            escape(t.name),
            f"{t.n:,}",
            *(f"{t.percentiles[q]:.3f}" for q in QUANTILES),
            f"{t.mean:.3f}",
            f"{t.max:.3f}",
        ]
        for t in report.timings
    ]
    head = ["timing (s)", "jobs", *(f"p{q}" for q in QUANTILES), "mean", "max"]
    return (
        '<h2>Timing</h2><p class="note">Seconds per job: <code>total</code> from start to '
        "result; <code>judge</code> scoring the steps, of which <code>sandbox_wait</code> "
        "waiting for a free sandbox slot; <code>collect</code> unpacking the submission.</p>"
        + _table(head, rows, set(range(1, len(head))))
    )
