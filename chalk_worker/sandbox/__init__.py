"""Containment of untrusted input: unpacking submissions and running scoring commands."""

from chalk_worker.sandbox.collect import unpack_submission
from chalk_worker.sandbox.policy import check_command
from chalk_worker.sandbox.probe import SandboxLayers, announce, detect_layers
from chalk_worker.sandbox.process import ProcessLimits, ProcessOutcome
from chalk_worker.sandbox.session import Sandbox, SandboxSession, get_sandbox

__all__ = [
    "ProcessLimits",
    "ProcessOutcome",
    "Sandbox",
    "SandboxLayers",
    "SandboxSession",
    "announce",
    "check_command",
    "detect_layers",
    "get_sandbox",
    "unpack_submission",
]
