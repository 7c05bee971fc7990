"""Which sandbox layers this machine provides, said once in plain words.

Every layer holds on its own; one the machine cannot provide is skipped with
a warning, never silently. Operators who want strictness list the layers they
require (``CHALK_SANDBOX_REQUIRE``) and the worker refuses to start without them.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from functools import cache

from chalk_client.errors import ConfigurationError
from chalk_worker.sandbox.cgroup_support import CgroupSupport

log = logging.getLogger("chalk_worker.sandbox")

LAYERS = ("user", "namespaces", "network", "memory", "pids", "kill", "rlimits")
"""Layer names an operator can require; ``all`` means every one."""


PROBE_TRIES = 3
"""How many times bubblewrap is tried before the worker goes on without it."""
PROBE_TIMEOUT_S = (10.0, 20.0, 40.0)
"""How long each try may take: a worker started on a loaded machine (a replacement
started beside busy ones) can take seconds to start even ``true``."""


def _bwrap_works(bwrap: str) -> str | None:
    """``None`` where bubblewrap runs a command in new namespaces, else what went wrong.

    A failure is tried again: a bubblewrap that is installed but was slow or refused
    once (a machine under load, a transient limit) must not leave the worker without
    its namespaces for its whole life.
    """
    why = "not tried"
    for attempt in range(PROBE_TRIES):
        try:
            done = subprocess.run(
                [bwrap, "--unshare-pid", "--unshare-net", "--ro-bind", "/", "/", "--", "true"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=PROBE_TIMEOUT_S[attempt],
            )
        except subprocess.TimeoutExpired:
            why = f"it did not run `true` within {PROBE_TIMEOUT_S[attempt]:.0f} s"
        except (OSError, subprocess.SubprocessError) as exc:
            why = f"it could not be started ({exc})"
        else:
            if done.returncode == 0:
                return None
            said = done.stderr.decode(errors="replace").strip()[:300]
            why = f"it exited with status {done.returncode}: {said or 'nothing said'}"
        if attempt + 1 < PROBE_TRIES:
            log.info("bubblewrap probe failed (%s); trying again", why)
            time.sleep(0.5 * (attempt + 1))
    return why


@dataclass(frozen=True)
class SandboxLayers:
    """What this machine gives the sandbox."""

    root: bool
    """Whether the worker runs as root (needed to switch scripts to per-slot users)."""
    bwrap: str | None
    """A working bubblewrap, for namespaces (PID, network, IPC, mount)."""
    setpriv: str | None
    """util-linux ``setpriv``, used inside bubblewrap to become the slot user."""
    cgroups: CgroupSupport
    bwrap_refused: str | None = None
    """Why an installed bubblewrap was not used (it failed its probe), if it was not."""

    @property
    def available(self) -> dict[str, str]:
        """Each layer present, with how it is provided."""
        have: dict[str, str] = {"rlimits": "core 0, file size, open files, CPU time"}
        if self.root and (self.setpriv or not self.bwrap):
            have["user"] = "each concurrent script runs as its own unprivileged uid, no groups"
        if self.bwrap:
            have["namespaces"] = "bubblewrap: own PID, mount, IPC and UTS namespaces"
            have["network"] = "bubblewrap: own network namespace with no interfaces up"
        if self.cgroups.memory:
            have["memory"] = f"memory cgroup under {self.cgroups.memory}"
        if self.cgroups.pids:
            have["pids"] = f"pids cgroup under {self.cgroups.pids}"
        elif "user" in have:
            have["pids"] = "RLIMIT_NPROC on the slot's own uid"
        killers = []
        if self.cgroups.kill:
            killers.append("cgroup.kill")
        if self.bwrap:
            killers.append("PID namespace teardown")
        if "user" in have:
            killers.append("sweep of the slot's uid")
        have["kill"] = ", ".join(killers) or "process group and a sweep by environment token"
        return have

    @property
    def missing(self) -> dict[str, str]:
        """Each layer absent, with what it would take."""
        absent = {}
        have = self.available
        if "user" not in have:
            absent["user"] = (
                "scripts run as the worker's own user: run the worker as root (it drops "
                "scripts to per-slot uids), with setpriv installed (util-linux)"
            )
        if "namespaces" not in have and self.bwrap_refused:
            absent["namespaces"] = (
                f"bubblewrap is installed but failed its probe: {self.bwrap_refused}"
            )
            absent["network"] = "scripts can reach the network: bubblewrap failed its probe"
        elif "namespaces" not in have:
            absent["namespaces"] = "install bubblewrap (apt-get install bubblewrap)"
            absent["network"] = "scripts can reach the network: install bubblewrap"
        if "memory" not in have:
            absent["memory"] = "no writable memory cgroup: a memory hog is not capped"
        if "pids" not in have:
            absent["pids"] = "no pids cgroup and no per-slot uid: a fork bomb is not capped"
        if not (self.cgroups.kill or self.bwrap or "user" in have):
            absent["kill"] = (
                "only a sweep by environment token finds leftover processes, and a hostile "
                "script can evade it"
            )
        return absent

    def report(self) -> list[str]:
        """The probe's findings, one plain sentence per layer."""
        lines = [f"sandbox layer {name}: on ({how})" for name, how in self.available.items()]
        lines += [f"sandbox layer {name}: OFF - {why}" for name, why in self.missing.items()]
        return lines

    def require(self, wanted: list[str]) -> None:
        """Raise ``ConfigurationError`` if a required layer is missing."""
        names = list(LAYERS) if "all" in wanted else wanted
        unknown = [name for name in names if name not in LAYERS]
        if unknown:
            raise ConfigurationError(
                f"unknown sandbox layer(s) {unknown} in CHALK_SANDBOX_REQUIRE; "
                f"choose from {', '.join(LAYERS)} or all"
            )
        lacking = {name: why for name, why in self.missing.items() if name in names}
        if lacking:
            details = "; ".join(f"{name}: {why}" for name, why in lacking.items())
            raise ConfigurationError(f"required sandbox layers are missing: {details}")


@cache
def detect_layers(tune_cgroups: bool = True) -> SandboxLayers:
    """Probe the machine once per process (``announce`` logs what was found)."""
    bwrap = shutil.which("bwrap")
    root = os.geteuid() == 0
    refused = _bwrap_works(bwrap) if bwrap else None
    layers = SandboxLayers(
        root=root,
        bwrap=bwrap if bwrap and refused is None else None,
        bwrap_refused=refused,
        setpriv=shutil.which("setpriv"),
        cgroups=CgroupSupport.detect(tune_cgroups) if root else CgroupSupport(None, None, None),
    )
    return layers


_announced = False


def announce(layers: SandboxLayers) -> None:
    """Log the probe's findings, once per process: a line per layer, warnings for the missing."""
    global _announced
    if _announced:
        return
    _announced = True
    for name, how in layers.available.items():
        log.info("sandbox layer %s: on (%s)", name, how)
    for name, why in layers.missing.items():
        log.warning("sandbox layer %s: OFF - %s", name, why)
    if layers.cgroups.kill and not layers.cgroups.fast_moves:
        log.warning(
            "cgroup2 is not mounted with favordynmods: each sandboxed run may spend ~10 ms "
            "moving into its cgroups (CHALK_SANDBOX_TUNE_CGROUPS=true lets the worker set it)"
        )
