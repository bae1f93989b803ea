"""The capture-request protocol, shared by the callback and ``profkit capture``: ask a running
PerformanceMonitor for a window from another process with a request file in its trace folder.

The callback (rank zero) looks for ``capture.request`` at most once a second, from the step-end hook: one
clock read per step, one ``stat`` per second. For a trace folder on object storage the folder looked in is the
local staging folder, and the finalizing process keeps the marker on the store and moves requests left there
into it (:class:`~lightning_profkit.monitor.writing.child.RequestMirror`). While a run is active it keeps a ``.profkit-run`` marker
there that names its process (host, pid and the process's start time), so ``profkit capture`` can tell a
live run from one whose process is gone. A marker still there when its process exits normally is
removed at exit, whatever became of the fit.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import time
from typing import Any, Optional

from lightning_profkit.atomic_files import write_atomic

REQUEST = "capture.request"
MARKER = ".profkit-run"


def write_json_atomic(path: str, data: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(data).encode())


_MARKERS: set[str] = set()  # markers this process holds, removed at exit if the fit never removed them


def process_start(pid: int) -> Optional[int]:
    """When process ``pid`` started, in clock ticks since boot (Linux); None where that cannot be read.
    With the pid it names one process: a pid reused by a later process has another start time."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rindex(b")") + 2:].split()[19])  # field 22; the name in () may hold spaces
    except (OSError, ValueError, IndexError):
        return None


def this_run() -> dict[str, Any]:
    """What a live-run marker says: this process, by host, pid and start time."""
    pid = os.getpid()
    return {"pid": pid, "host": socket.gethostname(), "process_start": process_start(pid), "started": time.time()}


def mark_running(trace_dir: str) -> str:
    """Write the live-run marker (creating ``trace_dir`` if needed); returns its path."""
    os.makedirs(trace_dir, exist_ok=True)
    path = os.path.join(trace_dir, MARKER)
    write_json_atomic(path, this_run())
    _MARKERS.add(path)
    return path


def unmark(path: str) -> None:
    """Remove a marker written by :func:`mark_running`."""
    _MARKERS.discard(path)
    try:
        os.remove(path)
    except OSError:
        pass


@atexit.register
def _unmark_all() -> None:
    for path in list(_MARKERS):
        unmark(path)


def running(trace_dir: str) -> Optional[dict[str, Any]]:
    """The marker of the run writing to ``trace_dir``, or None."""
    try:
        with open(os.path.join(trace_dir, MARKER), "rb") as f:
            return marker_of(f.read())
    except OSError:
        return None


def marker_of(text: bytes) -> Optional[dict[str, Any]]:
    """A marker's content, or None where it is not one."""
    try:
        marker = json.loads(text)
    except ValueError:
        return None
    return marker if isinstance(marker, dict) else None


def gone(marker: dict[str, Any]) -> Optional[str]:
    """Why the process that wrote ``marker`` is known to be gone, or None when it may still run (it is on
    this host and alive, or on another host, which cannot be checked from here)."""
    pid = marker.get("pid")
    if marker.get("host") != socket.gethostname() or not isinstance(pid, int):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return f"its process (pid {pid}) has exited"
    except PermissionError:
        pass  # alive, another user's
    start = marker.get("process_start")
    if start is not None and process_start(pid) not in (None, start):
        return f"its process (pid {pid}) has exited; that pid is now another process"
    return None


def request(steps: Optional[int] = None) -> dict[str, Any]:
    """A request for one window of ``steps`` recorded steps (None: the callback's ``active``)."""
    return {"steps": steps, "requested": time.time()}


def request_capture(trace_dir: str, steps: Optional[int] = None) -> str:
    """Drop a :func:`request` in ``trace_dir``."""
    path = os.path.join(trace_dir, REQUEST)
    write_json_atomic(path, request(steps))
    return path


def take_request(trace_dir: str) -> Optional[dict[str, Any]]:
    """Read and remove a pending request; None when there is none."""
    path = os.path.join(trace_dir, REQUEST)
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        data = {}  # unreadable or half-written by hand: still a request, with defaults
    try:
        os.remove(path)
    except OSError:
        pass
    steps = data.get("steps") if isinstance(data, dict) else None
    return {"steps": steps if isinstance(steps, int) and steps > 0 else None}


class RequestPoller:
    """Checks ``trace_dir`` for a request at most every ``interval`` seconds of ``time.perf_counter``."""

    __slots__ = ("trace_dir", "interval", "next_poll")

    def __init__(self, trace_dir: str, interval: float = 1.0) -> None:
        self.trace_dir, self.interval, self.next_poll = trace_dir, interval, 0.0

    def poll(self, now: float) -> Optional[dict[str, Any]]:
        if now < self.next_poll:
            return None
        self.next_poll = now + self.interval
        return take_request(self.trace_dir)


class LiveRun:
    """Rank zero's announcement of a running fit in its trace folder (the marker, creating the folder if it
    has to), and the capture requests it takes there. :meth:`end` withdraws the marker, and the folders too
    that this created for it and nothing was written into."""

    def __init__(self, trace_dir: str) -> None:
        self.created: list[str] = []  # the folders the marker needed, deepest first
        folder = os.path.abspath(trace_dir)
        while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
            self.created.append(folder)
            folder = os.path.dirname(folder)
        self.trace_dir = trace_dir
        self.marker = mark_running(trace_dir)
        take_request(trace_dir)  # a request left from an earlier run is stale
        self.poller: Optional[RequestPoller] = RequestPoller(trace_dir)

    @property
    def next_poll(self) -> float:
        return self.poller.next_poll if self.poller is not None else float("inf")

    def poll(self, now: float) -> Optional[dict[str, Any]]:
        """A request, if one is there and a poll is due; an OSError stops the polling and is raised."""
        if self.poller is None:
            return None
        try:
            return self.poller.poll(now)
        except OSError:
            self.poller = None
            raise

    def end(self) -> None:
        unmark(self.marker)
        self.poller = None
        for folder in self.created:
            try:
                os.rmdir(folder)  # ours, and nothing was written into it
            except OSError:
                break
