"""Containment of untrusted input: unpacking submissions and running scoring commands."""

from chalk_worker.sandbox.collect import unpack_submission
from chalk_worker.sandbox.policy import check_command
from chalk_worker.sandbox.process import ProcessLimits, ProcessOutcome, run_sandboxed

__all__ = [
    "ProcessLimits",
    "ProcessOutcome",
    "check_command",
    "run_sandboxed",
    "unpack_submission",
]
