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
from chalk_client.report import sections
from chalk_client.report.analysis import CAUSE_TEXT, Report
from chalk_client.report.table import page_row
from chalk_client.version import chalk_version

POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)
"""No request of any kind leaves the page."""


def _asset(name: str) -> str:
    return resources.files("chalk_client.report").joinpath(name).read_text(encoding="utf-8")


def _json_script(element_id: str, data: Any) -> str:
    # "<" escaped: no text in the data can close the script element.
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")
    return f'<script type="application/json" id="{element_id}">{text}</script>'


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
            sections.cards(report),
            sections.warning(report),
            sections.statuses(report),
            sections.scores(report),
            sections.zeros(report),
            sections.steps(report),
            sections.tests(report),
            sections.groups(report),
            sections.failures(report),
            sections.usage(report),
            sections.timing(report),
            _results(report, rows),
            _json_script("rows", rows),
            _json_script("causes", CAUSE_TEXT),
            f"<script>{_asset('page.js')}</script>",
            "</body></html>",
        ]
    )
