"""``chalk report``: a results file (or a batch on the cluster) as an HTML report and a CSV.

It also gives ``chalk score`` the totals of a whole results file, earlier runs included.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from chalk_client.cli.progress import Tally
from chalk_client.errors import ConfigurationError
from chalk_client.report import analyze, read_batch, read_results_file, render_page, write_csv
from chalk_client.report.load import Results
from chalk_client.settings import ChalkSettings
from chalk_client.wording import describe_causes, plural

COMMAND = "report"
"""The subcommand this module adds to ``chalk``."""


def add_command(commands: Any) -> None:
    """Add ``report`` to ``chalk``'s subcommands."""
    report = commands.add_parser(
        COMMAND,
        help="an HTML report (and a CSV) of a results file or a batch",
        description=(
            "Read RESULTS (the --out file of chalk score; the last line for a job is its "
            "result) or, with --batch, a batch's results on the cluster (CHALK_REDIS_URL), "
            "and write one self-contained HTML file that opens offline: counts by status, the "
            "score histogram, the mean with its 95% confidence interval, zeros by cause "
            "(grader errors apart), steps and rubric criteria, LLM tokens and cost, timing "
            "percentiles, groups by a metadata key, and a table of every job."
        ),
    )
    report.add_argument("results", nargs="?", type=Path, help="a results file (JSONL)")
    report.add_argument("--batch", metavar="ID", help="read the batch ID from the cluster instead")
    report.add_argument(
        "--out",
        type=Path,
        metavar="FILE",
        help="the HTML file to write (default: RESULTS with .html, or report-ID.html)",
    )
    report.add_argument(
        "--csv", type=Path, metavar="FILE", help="also write a CSV table, a row per job"
    )
    report.add_argument(
        "--by",
        metavar="KEY",
        help="group results by this key of the jobs' metadata (a.b reaches into objects)",
    )


def _load(args: argparse.Namespace) -> Results:
    if (args.results is None) == (args.batch is None):
        raise ConfigurationError(
            "give chalk report a results file (chalk report results.jsonl) or a batch on the "
            "cluster (chalk report --batch ID), one of them"
        )
    if args.results is not None:
        return read_results_file(args.results)
    settings = ChalkSettings()
    if not settings.redis_url:
        raise ConfigurationError(
            "chalk report --batch reads the cluster: set CHALK_REDIS_URL to its Redis, e.g. "
            "CHALK_REDIS_URL=redis://127.0.0.1:6379/0"
        )
    from chalk_client.client import ChalkClient  # Redis only for a batch on the cluster

    with ChalkClient(settings=settings) as client:
        return read_batch(client, args.batch)


def _html_path(args: argparse.Namespace) -> Path:
    if args.out is not None:
        return Path(args.out)
    if args.results is not None:
        return Path(args.results).with_suffix(".html")
    return Path(f"report-{args.batch}.html")


def _write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file: never half a report."""
    if path.is_dir():
        raise ConfigurationError(
            f"--out {path} is a folder; give a file name, e.g. {path / 'report.html'}"
        )
    partial = path.with_name(path.name + ".partial")
    try:
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise ConfigurationError(f"could not write {path}: {exc.strerror or exc}") from exc


def run_report(args: argparse.Namespace) -> int:
    """``chalk report``: write the HTML report (and the CSV); returns the exit status."""
    loaded = _load(args)
    html = _html_path(args)
    for given, other in ((html, args.results), (args.csv, args.results), (args.csv, html)):
        if (
            given is not None
            and other is not None
            and Path(given).resolve() == Path(other).resolve()
        ):
            raise ConfigurationError(
                f"{given} would be written over {other}; give another file name"
            )
    report = analyze(
        loaded.results,
        source=loaded.source,
        by=args.by,
        settings=ChalkSettings(),
        unfinished=loaded.unfinished,
    )
    _write(html, render_page(report, loaded.results))
    written = [str(html)]
    if args.csv is not None:
        try:
            write_csv(loaded.results, args.csv)
        except OSError as exc:
            raise ConfigurationError(
                f"could not write --csv {args.csv}: {exc.strerror or exc}"
            ) from exc
        written.append(str(args.csv))
    if loaded.torn:
        print(
            "chalk report: left out a half-written last line (an interrupted chalk score)",
            file=sys.stderr,
        )
    mean = "" if report.mean is None else f"; mean score {report.mean.describe()}"
    grader = f"; {plural(report.grader_errors, 'grader error')}" if report.grader_errors else ""
    print(
        f"chalk report: {plural(report.jobs, 'job')}{mean}{grader}; wrote {' and '.join(written)}",
        file=sys.stderr,
    )
    return 0


def file_totals(path: Path) -> str:
    """The totals of a whole results file (its current result per job), for ``chalk score``."""
    try:
        loaded = read_results_file(path)
    except ConfigurationError as exc:
        return f"Could not total {path}: {exc}"
    tally = Tally()
    for result in loaded.results:
        tally.add(result)
    text = (
        f"In {path} (all runs): {plural(tally.done, 'job')}, {tally.succeeded} succeeded, "
        f"{tally.failed} failed"
    )
    if tally.mean_score is not None:
        text += f"; mean score {tally.mean_score:.4f}"
    if tally.zeros:
        text += f"; zeros by cause: {describe_causes(tally.zeros)}"
    return text + "."
