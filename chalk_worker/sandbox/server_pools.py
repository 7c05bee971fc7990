"""The fork servers this process keeps, by kind, made when first asked for.

Three kinds (``ServerKind``): ``cold`` servers execute commands, ``warm`` ones
fork an interpreter that imported the standard modules and the task packages,
``warm-standard`` ones an interpreter that imported the standard modules only
(for runs that must not reach the graders' code: a student's program). None
where the machine cannot run them: they need root, bubblewrap, a user per slot
and the mount API of Linux 5.12 (detached mounts); each run then starts its own
sandbox.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from chalk_client.cores import cores_per_process
from chalk_client.settings import ChalkSettings
from chalk_worker.sandbox import syscalls
from chalk_worker.sandbox.bwrap import beside_packages
from chalk_worker.sandbox.probe import SandboxLayers
from chalk_worker.sandbox.servers import ForkServerPool, server_config

log = logging.getLogger(__name__)

ServerKind = Literal["cold", "warm", "warm-standard"]
"""A pool of fork servers: cold runs, warm ones with the task packages imported, warm ones
with the standard modules only."""


class ServerPools:
    """This process's pools of fork servers, one per kind, each made on first use."""

    def __init__(
        self,
        layers: SandboxLayers,
        readonly_roots: Sequence[Path],
        settings: ChalkSettings,
        *,
        slots: bool,
    ) -> None:
        self.layers = layers
        self.readonly_roots = list(readonly_roots)
        self.settings = settings
        self.slots = slots
        """Whether runs have users of their own (slots): servers need them."""
        self._pools: dict[ServerKind, ForkServerPool | None] = {}
        self._off: str | None = None
        self._lock = threading.Lock()

    def pool(self, kind: ServerKind) -> ForkServerPool | None:
        """The pool of ``kind``, made now if it is the first ask; ``None`` where off."""
        with self._lock:
            if kind in self._pools:
                return self._pools[kind]
            if self._off is None:
                self._off = self.why_off()
                if self._off:
                    log.info(
                        "fork servers are off: %s; each script starts its own sandbox", self._off
                    )
            if self._off:
                self._pools[kind] = None
                return None
            assert self.layers.bwrap is not None
            config = server_config(
                self.layers.bwrap,
                self.readonly_roots,
                warm=kind != "cold",
                own_python=not beside_packages(self.settings.sandbox_paths),
                tasks=kind == "warm",
            )
            made = ForkServerPool(config, max_idle=cores_per_process())
            self._pools[kind] = made
            return made

    def why_off(self) -> str:
        """Why this machine can have no fork servers ("" when it can)."""
        if not (self.layers.root and self.layers.bwrap and self.slots):
            return "they need root and bubblewrap"
        try:
            os.close(syscalls.open_tree_clone("/"))
        except OSError as exc:
            return f"this kernel cannot make detached mounts ({exc.strerror})"
        return ""

    def close(self) -> None:
        """Stop every server of every pool."""
        with self._lock:
            pools = [pool for pool in self._pools.values() if pool is not None]
        for pool in pools:
            pool.close()
