"""The report as one HTML file: inline CSS, inline SVG charts, an inline script for the table.

Nothing is fetched: a Content-Security-Policy forbids every request, so the
file reads the same offline, from a mail attachment or an archive. Every text
from the results is escaped here or set as text by the script.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from html import escape
from importlib import resources
from typing import Any

from chalk_client.jobs import JobResult
from chalk_client.report.analysis import CAUSE_TEXT, QUANTILES, Report
from chalk_client.report.charts import Bar, bars_svg, histogram_svg, intervals_svg
from chalk_client.report.table import page_row
from chalk_client.usage import format_cost
from chalk_client.version import chalk_version

POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)
"""No request of any kind leaves the page."""
STATUS_ORDER = ("succeeded", "failed", "running", "queued", "unknown")


def _asset(name: str) -> str:
    return resources.files("chalk_client.report").joinpath(name).read_text(encoding="utf-8")


def _json_script(element_id: str, data: Any) -> str:
    # "<" escaped: no text in the data can close the script element.
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")
    return f'<script type="application/json" id="{element_id}">{text}</script>'


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


def _cards(report: Report) -> str:
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


def _warning(report: Report) -> str:
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


def _statuses(report: Report) -> str:
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


def _scores(report: Report) -> str:
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


def _zeros(report: Report) -> str:
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


def _steps(report: Report) -> str:
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


def _failures(report: Report) -> str:
    if not report.failures:
        return ""
    rows = [[escape(error), f"{count:,}"] for error, count in report.failures.most_common(20)]
    return (
        '<h2>Failures</h2><p class="note">Jobs the system could not score (no verdict), by '
        "error.</p>" + _table(["error", "jobs"], rows, {1})
    )


def _groups(report: Report) -> str:
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


def _usage(report: Report) -> str:
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


def _timing(report: Report) -> str:
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


def _results(report: Report, rows: list[dict[str, Any]]) -> str:
    statuses = sorted({row["st"] for row in rows})
    causes = sorted({row["ca"] for row in rows if row["ca"]})
    status_options = "".join(f'<option value="{escape(s)}">{escape(s)}</option>' for s in statuses)
    cause_options = '<option value="any">any cause</option>' + "".join(
        f'<option value="{escape(c)}">{escape(c)}</option>' for c in causes
    )
    group = ""
    if report.by:
        values = sorted({row["g"] for row in rows if row["g"] is not None})
        options = "".join(f'<option value="{escape(v)}">{escape(v)}</option>' for v in values)
        group = (
            f'<select id="filter-group" aria-label="{escape(report.by)}">'
            f'<option value="">every {escape(report.by)}</option>{options}</select>'
        )
    return (
        '<h2 id="results">Results</h2>'
        '<p class="note">Click a job to see its reasons, output and metadata. Long texts are '
        "cut here (head and tail); the results file has them whole.</p>"
        '<div class="filters">'
        '<input id="filter-text" type="search" '
        'placeholder="filter: job id, error, reason, output...">'
        '<select id="filter-status" aria-label="status"><option value="">every status</option>'
        f"{status_options}</select>"
        '<select id="filter-cause" aria-label="cause"><option value="">every score</option>'
        f"{cause_options}</select>{group}"
        '<span id="shown"></span></div>'
        "<table><thead><tr>"
        '<th data-sort="id">job</th><th data-sort="st">status</th>'
        '<th class="num" data-sort="sc">score</th><th data-sort="ca">cause</th>'
        f'<th data-sort="g">{escape(report.by or "")}</th>'
        '<th class="num" data-sort="t">seconds</th><th>error / steps</th>'
        '</tr></thead><tbody id="results-body"></tbody></table>'
        '<button id="more" hidden>Show more</button>'
    )


def render_page(report: Report, results: Sequence[JobResult]) -> str:
    """The whole report page for ``report`` (computed from ``results``)."""
    rows = [page_row(result, report.by) for result in results]
    generated = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    title = f"Chalk report: {report.source}"
    return "".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{escape(title)}</title><style>{_asset('page.css')}</style></head><body>",
            "<h1>Chalk report</h1>",
            f'<p class="meta">{escape(report.source)} &middot; {report.jobs:,} jobs &middot; '
            f"generated {generated} by chalk-queue {escape(chalk_version())}</p>",
            _cards(report),
            _warning(report),
            _statuses(report),
            _scores(report),
            _zeros(report),
            _steps(report),
            _groups(report),
            _failures(report),
            _usage(report),
            _timing(report),
            _results(report, rows),
            _json_script("rows", rows),
            _json_script("causes", CAUSE_TEXT),
            f"<script>{_asset('page.js')}</script>",
            "</body></html>",
        ]
    )
