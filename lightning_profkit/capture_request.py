"""Ask a running PerformanceMonitor for a window from another process: a request file in its trace folder.

The callback (rank zero) looks for ``capture.request`` at most once a second, from the step-end hook: one
clock read per step, one ``stat`` per second. While a run is active it keeps a ``.profkit-run`` marker
there, so ``profkit capture`` can tell a live run from a finished one.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any, Optional

REQUEST = "capture.request"
MARKER = ".profkit-run"


def write_json_atomic(path: str, data: dict[str, Any]) -> None:
    tmp = f"{os.path.join(os.path.dirname(path), '.profkit-' + os.path.basename(path))}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def mark_running(trace_dir: str) -> str:
    path = os.path.join(trace_dir, MARKER)
    write_json_atomic(path, {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()})
    return path


def running(trace_dir: str) -> Optional[dict[str, Any]]:
    """The marker of the run writing to ``trace_dir``, or None."""
    try:
        with open(os.path.join(trace_dir, MARKER)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def request_capture(trace_dir: str, steps: Optional[int] = None) -> str:
    """Drop a request for one window of ``steps`` recorded steps (None: the callback's ``active``)."""
    path = os.path.join(trace_dir, REQUEST)
    write_json_atomic(path, {"steps": steps, "requested": time.time()})
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
