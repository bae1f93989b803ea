"""What this process may use of the machine (read by both sides: the advice and the command's workers)."""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """The CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
