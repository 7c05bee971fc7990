"""The cores a worker may use, and one worker process's share of them.

``chalk worker`` starts one worker process per usable core with the threads pool
(``chalk_client.cli.processes``) and tells each how many siblings it has
(``CHALK_WORKER_PROCESSES``); what a process sizes by the machine's cores (scripts
at once, regex helpers, idle fork servers) it then sizes by its share.
"""

from __future__ import annotations

import os

PROCESSES_ENV = "CHALK_WORKER_PROCESSES"


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, as a container's cpuset)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cores_per_process() -> int:
    """This worker process's share of the usable cores (all of them when it is alone)."""
    try:
        siblings = max(1, int(os.environ.get(PROCESSES_ENV) or 1))
    except ValueError:
        siblings = 1
    return max(1, usable_cores() // siblings)
