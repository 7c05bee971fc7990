"""The operator's commands of ``chalk``: ``health``, ``purge``, ``retry --failed``, ``cancel``.

Each needs the cluster (``CHALK_REDIS_URL``) and returns an exit status:
``health`` 0 when the cluster can score and 1 when it cannot (no live worker);
``purge`` and ``retry`` 0 when done, 2 when refused; ``cancel`` 0 when done
(nothing left to cancel included), 1 for an unknown batch. An unreachable Redis is
reported by ``chalk`` itself (status 2).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from chalk_client.settings import ChalkSettings

if TYPE_CHECKING:
    from chalk_client.client import ChalkClient
    from chalk_client.summary import BatchSummary

COMMANDS = ("health", "purge", "retry", "cancel")
"""The subcommands this module adds to ``chalk``."""


def add_commands(commands: Any) -> None:
    """Add ``health``, ``purge``, ``retry`` and ``cancel`` to ``chalk``'s subcommands."""
    commands.add_parser(
        "health",
        help="is the cluster able to score: Redis, queue, live workers and their sandboxes",
    )
    purge = commands.add_parser(
        "purge",
        help="take jobs that have not started off the cluster (they end failed: purged)",
        description=(
            "Without BATCH, empty the queue: the job of every queued message is purged. With "
            "BATCH, purge that batch's jobs that have not started. Purged jobs get a failed "
            "result saying so; `chalk retry --failed BATCH` scores them later. Jobs being "
            "scored, and jobs with a result, are left alone."
        ),
    )
    purge.add_argument("batch", nargs="?", help="only this batch's jobs")
    purge.add_argument("--yes", action="store_true", help="do it (without it, nothing is done)")
    retry = commands.add_parser(
        "retry",
        help="score again the jobs of a batch whose result is failed (or cancelled)",
        description=(
            "Send the failed and cancelled jobs of BATCH again, as a new batch; the rest "
            "stay as is."
        ),
    )
    retry.add_argument("--failed", metavar="BATCH", required=True, help="the batch to retry")
    retry.add_argument("--wait", action="store_true", help="wait for them and print a summary")
    cancel = commands.add_parser(
        "cancel",
        help="cancel a batch: its waiting jobs never start, its running ones are stopped",
        description=(
            "Cancel BATCH_ID: its jobs that have not started never will, and those running "
            "are stopped (their scripts killed within 2 s); each ends cancelled. Results "
            "already written stay; `chalk retry --failed BATCH_ID` scores the cancelled (and "
            "failed) jobs later."
        ),
    )
    cancel.add_argument("batch", metavar="BATCH_ID", help="the batch to cancel")


def _cluster(command: str) -> ChalkClient | None:
    # Imported here: building the parser of every ``chalk`` command must stay cheap.
    from chalk_client.client import ChalkClient

    settings = ChalkSettings()
    if settings.redis_url:
        return ChalkClient(settings=settings)
    print(
        f"chalk {command}: set CHALK_REDIS_URL to the cluster's Redis, e.g. "
        "CHALK_REDIS_URL=redis://127.0.0.1:6379/0",
        file=sys.stderr,
    )
    return None


def _health(client: ChalkClient) -> int:
    from chalk_client.cli.health import check_health

    settings = client.settings
    broker_is_redis = not settings.broker_url or settings.broker_url == client.redis_url
    report = check_health(
        client.store.redis,
        client.redis_url,
        settings.queue,
        broker_is_redis=broker_is_redis,
        lease_s=settings.lease_s,
        visibility_timeout_s=settings.visibility_timeout_s,
        wait_replicas=settings.redis_wait_replicas,
    )
    print(report.render())
    return 1 if report.problems else 0


def _purge(client: ChalkClient, args: argparse.Namespace) -> int:
    from chalk_client.cli.purge import purge_batch, purge_queue
    from chalk_client.cluster.connection import redacted

    if args.batch:
        if not args.yes:
            print(
                f"chalk purge: would purge the jobs of batch {args.batch} that have not "
                "started; run again with --yes to do it",
                file=sys.stderr,
            )
            return 2
        print(purge_batch(client, args.batch).render(f"batch {args.batch}"))
        return 0
    if not args.yes:
        waiting = client.store.queue_length()
        print(
            f"chalk purge: would empty queue {client.settings.queue} at "
            f"{redacted(client.redis_url)} ({waiting} message(s)) and purge their jobs; run "
            "again with --yes to do it",
            file=sys.stderr,
        )
        return 2
    print(purge_queue(client).render(f"queue {client.settings.queue}"))
    return 0


def _retry(client: ChalkClient, args: argparse.Namespace) -> int:
    from chalk_client.cli.retry import retry_failed

    report = retry_failed(client, args.failed)
    print(report.render())
    if args.wait and report.retry is not None:
        report.retry.wait()
        print(report.retry.summary().render())
    return 0


def run_command(args: argparse.Namespace) -> int:
    """Run ``chalk health``, ``chalk purge``, ``chalk retry`` or ``chalk cancel``."""
    client = _cluster(args.command)
    if client is None:
        return 2
    with client:
        if args.command == "health":
            return _health(client)
        if args.command == "purge":
            return _purge(client, args)
        if args.command == "cancel":
            return _cancel(client, args.batch)
        return _retry(client, args)


def _cancel(client: ChalkClient, batch_id: str) -> int:
    from chalk_client.errors import QueueError

    try:
        batch = client.batch(batch_id)
    except QueueError as exc:
        print(f"chalk cancel: {exc}", file=sys.stderr)
        return 1
    print(batch.cancel().render())
    return 0


def eta_line(client: ChalkClient, summary: BatchSummary) -> str | None:
    """The batch's pace and ETA for ``chalk status BATCH`` (``None`` if unknown)."""
    from chalk_client.cli.eta import batch_progress

    progress = batch_progress(client.store, summary)
    return None if progress is None else progress.render()
