"""Containment of untrusted input: unpacking submissions and running scoring commands.

Names are imported on first use: a process that never runs a script (``chalk
score`` with regex judges) does not load the sandbox's machinery.
"""

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chalk_worker.sandbox.collect import unpack_submission
    from chalk_worker.sandbox.policy import check_command
    from chalk_worker.sandbox.probe import SandboxLayers, announce, detect_layers
    from chalk_worker.sandbox.process import ProcessLimits, ProcessOutcome
    from chalk_worker.sandbox.session import Sandbox, SandboxSession, get_sandbox

_HOME = {
    "ProcessLimits": "process",
    "ProcessOutcome": "process",
    "Sandbox": "session",
    "SandboxLayers": "probe",
    "SandboxSession": "session",
    "announce": "probe",
    "check_command": "policy",
    "detect_layers": "probe",
    "get_sandbox": "session",
    "unpack_submission": "collect",
}


def __getattr__(name: str) -> object:
    """The sandbox's public names, imported from their module when first asked for."""
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'chalk_worker.sandbox' has no attribute {name!r}")
    value = getattr(import_module(f"chalk_worker.sandbox.{module}"), name)
    globals()[name] = value
    return value


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
