"""Which jobs of a rollouts file ``chalk score`` scores: ``--only``, ``--limit``, ``--rescore``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from chalk_client.errors import InvalidJobError
from chalk_client.jobs import ScoringJob

SHOWN = 5
"""Unknown ``--only`` ids named in the error (all are counted)."""


def parse_ids(values: Iterable[str]) -> frozenset[str]:
    """The ids of ``--only`` options, each a comma-separated list (blanks ignored)."""
    return frozenset(part.strip() for value in values for part in value.split(",") if part.strip())


@dataclass(frozen=True)
class Selection:
    """What to score of a file's jobs.

    Each id is scored once (a repeated id is one job). Jobs already scored in
    ``--out`` are skipped unless ``rescore``; ``only`` keeps the jobs with those
    ids (``None``: all); ``limit`` then keeps the first ``limit`` jobs still to
    score, in file order, so that repeated runs with the same ``--out`` and
    ``--limit`` go on through the file.
    """

    only: frozenset[str] | None = None
    limit: int | None = None
    rescore: bool = False

    def pick(
        self, jobs: Sequence[ScoringJob], done: frozenset[str]
    ) -> tuple[list[ScoringJob], int]:
        """The jobs to score, in file order, and how many were skipped as already scored.

        Raises ``InvalidJobError`` when an ``only`` id is not in ``jobs``.
        """
        if self.only is not None:
            missing = self.only - {job.id for job in jobs}
            if missing:
                names = ", ".join(sorted(missing)[:SHOWN])
                more = f" and {len(missing) - SHOWN} more" if len(missing) > SHOWN else ""
                raise InvalidJobError(
                    f"--only names {len(missing)} id(s) that no valid line of the rollouts file "
                    f"has: {names}{more}. A line without an id gets one from its text (see the "
                    "job_id of its results in --out)"
                )
        todo: list[ScoringJob] = []
        seen: set[str | None] = set()
        skipped = 0
        for job in jobs:
            if job.id in seen or (self.only is not None and job.id not in self.only):
                continue
            seen.add(job.id)
            if job.id in done and not self.rescore:
                skipped += 1
            elif self.limit is None or len(todo) < self.limit:
                todo.append(job)
        return todo, skipped
