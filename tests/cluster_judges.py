"""Custom judges the tests' workers load (``CHALK_TASK_MODULES=cluster_judges``)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from chalk_client.judges import Judge, register_judge
from chalk_client.scoring import Scoring
from chalk_client.transcript import Transcript


@register_judge("test_log")
class LoggingJudge(Judge):
    """Appends ``start KEY PID`` and ``end KEY PID`` to ``log``: one ``end`` per scoring.

    With ``gate``, waits for that file to exist between the two; with ``sleep_s``,
    sleeps that long. Scores ``score``.
    """

    def __init__(
        self, log: str, key: str, gate: str | None = None, sleep_s: float = 0, score: float = 1
    ) -> None:
        self.log, self.key, self.gate, self.sleep_s, self.score = log, key, gate, sleep_s, score

    def _write(self, event: str) -> None:
        with open(self.log, "a") as out:
            out.write(f"{event} {self.key} {os.getpid()}\n")

    def evaluate(self, transcript: Transcript) -> Scoring:
        self._write("start")
        deadline = time.monotonic() + 120
        while self.gate and not Path(self.gate).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(self.sleep_s)
        self._write("end")
        return Scoring(score=self.score, metadata={"pid": str(os.getpid())}, continue_task=True)


@register_judge("test_async_sleep")
class AsyncSleepJudge(Judge):
    """Waits ``sleep_s`` on the worker's event loop, as a job waiting on an LLM does."""

    def __init__(self, sleep_s: float) -> None:
        self.sleep_s = sleep_s

    def evaluate(self, transcript: Transcript) -> Scoring:  # type: ignore[override]
        return self._wait()  # type: ignore[return-value]  # a coroutine: awaited on the loop

    async def _wait(self) -> Scoring:
        await asyncio.sleep(self.sleep_s)
        return Scoring(score=1, metadata={}, continue_task=True)


@register_judge("chaos_log")
class ChaosLogJudge(Judge):
    """Appends ``KEY PID TIME`` to ``log`` when it starts scoring, and passes (score 1).

    Put first in an ``all`` judge, it records each time a worker started the job.
    """

    def __init__(self, log: str, key: str) -> None:
        self.log, self.key = log, key

    def evaluate(self, transcript: Transcript) -> Scoring:
        with open(self.log, "a") as out:
            out.write(f"{self.key} {os.getpid()} {time.time():.3f}\n")
        return Scoring(score=1, metadata={}, continue_task=True)
