"""What this process may use of the machine (read by both sides: the advice and the command's workers), and what
another process has used of it."""

from __future__ import annotations

import os
from typing import Optional


def usable_cpus() -> int:
    """The CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cpu_seconds_of(pid: int) -> Optional[float]:
    """CPU seconds (user and system) process ``pid`` has used so far, from ``/proc`` (Linux: in clock ticks,
    1/100 s); None where that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()  # after the command name, which may hold anything
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    except (OSError, ValueError, IndexError):
        return None
