"""The ``chalk`` command."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import TextIO

from pydantic import ValidationError

from chalk_client.cli import acl, ops, report, serve
from chalk_client.cli.progress import ProgressBar, ResultSink, Tally
from chalk_client.cli.selection import Selection, parse_ids
from chalk_client.errors import ChalkError, ConfigurationError
from chalk_client.extras import require_worker
from chalk_client.jobs import DEFAULT_PRIORITY, PRIORITIES, ScoringJob
from chalk_client.rollouts import BadLine, DefaultJudge, ResultsFile, read_rollouts
from chalk_client.settings import ChalkSettings
from chalk_client.version import chalk_version


def _at_least_one(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return number


def _one_line(text: str) -> str:
    """A message on one line: its lines joined with "; " (or a space after punctuation)."""
    joined = ""
    for line in filter(None, (line.strip() for line in text.splitlines())):
        if joined:
            joined += " " if joined.endswith((";", ":", ",", ".")) else "; "
        joined += line
    return joined


def _settings_problem(exc: ValidationError) -> str:
    """What is wrong with the ``CHALK_*`` variables, on one line."""
    problems = [
        f"CHALK_{str(error['loc'][0]).upper() if error['loc'] else '*'}={error['input']!r:.40}: "
        f"{error['msg']}"
        for error in exc.errors(include_url=False)
    ]
    return "invalid setting: " + "; ".join(problems) + ". Fix the variable or unset it."


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chalk", description="Chalk Queue: score the work of AI agents."
    )
    parser.add_argument("--version", action="version", version=f"chalk {chalk_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    score = commands.add_parser(
        "score",
        help="score a JSONL file of rollouts",
        description=(
            "Score every job of ROLLOUTS (one ScoringJob as JSON per line). Without "
            "CHALK_REDIS_URL the jobs are scored here, concurrently, with no server needed."
        ),
    )
    score.add_argument("rollouts", type=Path, nargs="?", help="JSONL file, one job per line")
    score.add_argument(
        "--from-inspect",
        type=Path,
        metavar="LOG",
        help="score the samples of an inspect_ai eval log instead (needs --judge)",
    )
    score.add_argument(
        "--judge", type=Path, help="JSON judge (or list of steps) for lines that have none"
    )
    score.add_argument(
        "--out",
        type=Path,
        help=(
            "JSONL results file, only ever added to; jobs that succeeded there are skipped "
            "(default: stdout)"
        ),
    )
    score.add_argument(
        "--concurrency",
        type=_at_least_one,
        default=None,
        metavar="N",
        help="jobs scored at once without a cluster, at least 1 (default: 32)",
    )
    score.add_argument(
        "--skip-invalid",
        action="store_true",
        help=(
            "score the valid lines even if some are invalid (they are reported, and each "
            "gets a failed result in --out saying why)"
        ),
    )
    score.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 if some job scored 0 through a grader error (a failing scoring script)",
    )
    score.add_argument(
        "--limit",
        type=_at_least_one,
        metavar="N",
        help="score at most N jobs: the first N of the file still to be scored",
    )
    score.add_argument(
        "--only",
        action="append",
        metavar="ID,...",
        help="score only the jobs with these ids (comma-separated; may be repeated)",
    )
    score.add_argument(
        "--rescore",
        action="store_true",
        help="score again the jobs already scored in --out (e.g. under a new judge)",
    )
    score.add_argument(
        "--priority",
        choices=PRIORITIES,
        default=DEFAULT_PRIORITY,
        help=(
            "on the cluster: workers take every high job waiting before a normal one, and "
            "every normal one before a low one (default: normal; a line's own priority wins)"
        ),
    )
    for name, text in (
        ("worker", "start a cluster worker (Celery's worker flags pass through)"),
        ("flower", "start Flower to watch the cluster (Flower's flags pass through)"),
    ):
        commands.add_parser(name, help=text, add_help=False)
    status = commands.add_parser("status", help="state of a job, a batch, or the cluster")
    status.add_argument("target", nargs="?", help="a job id or batch id (default: the cluster)")
    ops.add_commands(commands)
    report.add_command(commands)
    serve.add_command(commands)
    acl.add_command(commands)
    return parser


def _read_inspect(log: Path, default: DefaultJudge | None) -> Iterator[ScoringJob | BadLine]:
    # inspect_ai is an optional extra: imported only for --from-inspect.
    from chalk_client.integrations.inspect_logs import jobs_from_log

    if default is None:
        raise ConfigurationError("--from-inspect needs --judge: an inspect log has no Chalk judge")
    return jobs_from_log(log, default)


def _load_jobs(args: argparse.Namespace) -> tuple[list[ScoringJob], list[BadLine]]:
    default = DefaultJudge.from_file(args.judge) if args.judge else None
    jobs: list[ScoringJob] = []
    bad: list[BadLine] = []
    items = (
        _read_inspect(args.from_inspect, default)
        if args.from_inspect
        else read_rollouts(args.rollouts, default)
    )
    for item in items:
        (bad if isinstance(item, BadLine) else jobs).append(item)  # type: ignore[arg-type]
    return jobs, bad


async def _score_embedded(
    jobs: Iterator[ScoringJob],
    sink: ResultSink,
    concurrency: int | None,
    settings: ChalkSettings,
) -> None:
    # The embedded queue runs the worker's own runner in this process: the one place
    # the client reaches into chalk_worker, and only when no cluster is configured.
    # (It installs no metrics: nothing serves them here.)
    from chalk_worker.run.embedded import score_stream

    async for result in score_stream(jobs, settings=settings, concurrency=concurrency):
        sink.write(result)


def _trace_skipped(
    bad: list[BadLine], args: argparse.Namespace, results: ResultsFile | None, out: TextIO
) -> None:
    """Record each skipped line as a failed result, unless it is scored or recorded already."""
    for line in bad:
        trace = line.trace(args.rollouts)
        if results is not None and (
            line.job_id in results.done or results.failures.get(line.job_id) == trace.error
        ):
            continue
        out.write(trace.model_dump_json() + "\n")
    out.flush()


def _score(args: argparse.Namespace) -> int:
    if (args.rollouts is None) == (args.from_inspect is None):
        print("chalk score: give a ROLLOUTS file or --from-inspect LOG (one)", file=sys.stderr)
        return 2
    source = args.rollouts or args.from_inspect
    if not source.is_file():
        what = "rollouts file" if args.rollouts else "inspect log"
        print(f"chalk score: no {what} at {source}", file=sys.stderr)
        return 2
    inputs = {"rollouts file": args.rollouts, "judge file": args.judge}
    inputs["inspect log"] = args.from_inspect
    results = ResultsFile.read(args.out, inputs) if args.out else None
    jobs, bad = _load_jobs(args)
    for line in bad:
        print(f"{source}:{line.number}: invalid job: {line.reason}", file=sys.stderr)
    if bad and not args.skip_invalid:
        print(
            f"chalk score: {len(bad)} invalid line(s); nothing was scored. Fix them, or pass "
            "--skip-invalid to score the valid lines.",
            file=sys.stderr,
        )
        return 2
    only = parse_ids(args.only) if args.only else None
    selection = Selection(only=only, limit=args.limit, rescore=args.rescore)
    todo, skipped = selection.pick(jobs, results.done if results else frozenset())
    settings = ChalkSettings()
    if not settings.redis_url:
        require_worker(
            "scoring without a cluster", or_else="or set CHALK_REDIS_URL to score on a cluster"
        )
    tally = Tally(total=len(todo), skipped=skipped)
    bar = ProgressBar(tally)
    context = results.open() if results else nullcontext(sys.stdout)
    with context as out:
        _trace_skipped(bad, args, results, out)
        sink = ResultSink(out, tally, bar)
        if settings.redis_url:
            if args.concurrency is not None:
                print(
                    "chalk score: --concurrency sets the embedded queue's jobs at once; on the "
                    "cluster each worker sets its own (chalk worker --concurrency N)",
                    file=sys.stderr,
                )
            from chalk_client.cli.cluster import score_on_cluster  # Redis only when used

            score_on_cluster(todo, sink, rescore=args.rescore, priority=args.priority)
        else:
            asyncio.run(_score_embedded(iter(todo), sink, args.concurrency, settings))
    bar.close()
    print(tally.summary(), file=sys.stderr)
    if bad:
        print(
            f"Skipped {len(bad)} invalid line(s) (--skip-invalid); the output holds a failed "
            "result for each, saying why.",
            file=sys.stderr,
        )
    if results is not None and results.regular and (results.size or bad):
        print(report.file_totals(results.path), file=sys.stderr)
    return 1 if tally.failed or (args.strict and tally.grader_errors) else 0


RUNNERS: dict[str, Callable[[argparse.Namespace], int]] = {
    report.COMMAND: report.run_report,
    serve.COMMAND: serve.run_serve,
    acl.COMMAND: acl.run_acl,
}
"""The commands of their own modules, by name."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``chalk`` command; returns the exit status."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    argv = sys.argv[1:] if argv is None else list(argv)
    command = argv[0] if argv else ""
    # The cluster's commands import Redis and kombu (cluster_cli): `chalk score` without
    # a cluster never needs them, so they are imported only by the commands that do.
    try:
        if command == "worker":
            from chalk_client.cli.cluster import run_worker

            return run_worker(argv[1:])
        if command == "flower":
            from chalk_client.cli.cluster import run_flower

            return run_flower(argv[1:])
        args = _parser().parse_args(argv)
        if args.command == "score":
            return _score(args)
        if args.command == "status":
            from chalk_client.cli.cluster import run_status

            return run_status(args.target)
        if args.command in ops.COMMANDS:
            return ops.run_command(args)
        return RUNNERS[args.command](args)
    except ChalkError as exc:
        print(f"chalk {command}: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        if exc.title != ChalkSettings.__name__:
            raise
        print(f"chalk {command}: {_settings_problem(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nchalk: interrupted; re-run with the same --out to resume.", file=sys.stderr)
        return 130
