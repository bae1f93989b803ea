"""What this process may use of the machine, and what a process has used of it."""

from __future__ import annotations

import os
import time
from typing import Optional


def usable_cpus() -> int:
    """The CPU cores this process may run on."""
    return len(os.sched_getaffinity(0))


def _proc(path: str) -> bytes:
    """A small ``/proc`` file's text, in one system call each to open, read and close it (read at rolling checks)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def _stat(pid: int, *at: int) -> Optional[list[int]]:
    """Numbers of ``/proc/PID/stat``, counted from 0 at field 3 (after the command name, which may hold anything)."""
    try:
        fields = _proc(f"/proc/{pid}/stat").rsplit(b")", 1)[1].split()
        return [int(fields[i]) for i in at]
    except (OSError, IndexError, ValueError):
        return None


def cpu_seconds_of(pid: int) -> Optional[float]:
    """CPU seconds (user and system) process ``pid`` has used so far (Linux); None where that cannot be read."""
    ticks = _stat(pid, 11, 12)  # utime, stime
    return None if ticks is None else sum(ticks) / os.sysconf("SC_CLK_TCK")


def process_start(pid: int) -> Optional[int]:
    """When process ``pid`` started, in clock ticks since boot (Linux; with the pid it names one process); None
    where that cannot be read."""
    ticks = _stat(pid, 19)  # field 22, starttime
    return None if ticks is None else ticks[0]


def scheduled_seconds_of(pid: int) -> Optional[tuple[float, Optional[float]]]:
    """Seconds process ``pid`` (its main thread) has run on a CPU, and waited for one while ready to run (Linux;
    the second None where only ``/proc/PID/stat`` can be read); None where neither can."""
    scheduled = _schedstat(f"/proc/{pid}/schedstat")
    if scheduled is None:
        cpu = cpu_seconds_of(pid)
        return None if cpu is None else (cpu, None)
    return scheduled


def thread_scheduled_seconds() -> tuple[float, Optional[float]]:
    """Seconds the calling thread has run on a CPU, and waited for one while ready to run, from
    ``/proc/thread-self/schedstat`` (Linux); elsewhere its CPU time and None."""
    scheduled = _schedstat("/proc/thread-self/schedstat")
    return scheduled if scheduled is not None else (time.thread_time(), None)


def _schedstat(path: str) -> Optional[tuple[float, float]]:
    """Seconds on a CPU and seconds waiting for one, from a ``schedstat`` file."""
    try:
        ran, waited = _proc(path).split()[:2]
        return int(ran) / 1e9, int(waited) / 1e9
    except (OSError, ValueError):
        return None
