"""The capture-request protocol, shared by the callback and ``profkit capture``: a request file in a running fit's
trace folder asks it for a window (docs/alerts.md, Capture on demand). Design notes: docs/how-it-works.md."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import secrets
import socket
import time
from typing import Any, Callable, Optional

from lightning_profkit.atomic_files import write_atomic
from lightning_profkit.machine import process_start
from lightning_profkit.opener import FileRefused, open_regular
from lightning_profkit.printable import printable
from lightning_profkit.store import is_url, join, read, write

REQUEST = "capture.request"
MARKER = ".profkit-run"
MAX_BYTES = 4000  # the most of a marker or a request that is read
MAX_STEPS = 100  # the most steps one request may ask for: a window that long is already a large trace


def running(trace_dir: str) -> Optional[dict[str, Any]]:
    """The marker of the run writing to ``trace_dir`` (a folder or a URL), or None (also where :func:`_read_own`
    refuses it)."""
    if is_url(trace_dir):
        return marker_of(read(join(trace_dir, MARKER), MAX_BYTES) or b"")
    try:
        return marker_of(_read_own(os.path.join(trace_dir, MARKER)))
    except (OSError, FileRefused):
        return None


def _read_own(path: str) -> bytes:
    """The plain file ``path`` (empty where it cannot be read), or :class:`FileRefused` where another user made it:
    another user's marker or request neither stops nor steers a fit. An OSError: its folder cannot be read."""
    with open_regular(path, MAX_BYTES) as f:
        uid = os.fstat(f.fileno()).st_uid
        if uid != os.getuid():
            raise FileRefused(f"{path}: made by user id {uid}, not by this run's user ({os.getuid()})")
        with contextlib.suppress(OSError):
            return f.read(MAX_BYTES)
    return b""


def other_fit(trace_dir: str, fit: Optional[str] = None) -> Optional[str]:
    """Which fit other than ``fit`` writes to ``trace_dir`` now (its process may still run), in words; or None."""
    marker = running(trace_dir)
    if marker is None or marker.get("fit") == fit or not_running(marker) is not None:
        return None
    return printable(f"pid {str(marker.get('pid'))[:20]} on {str(marker.get('host'))[:255]}")


def marker_of(text: bytes) -> Optional[dict[str, Any]]:
    """The JSON object in ``text`` (a marker, a request), or None: none there, or over :data:`MAX_BYTES`."""
    if len(text) > MAX_BYTES:
        return None
    try:
        marker = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return marker if isinstance(marker, dict) else None


def not_running(marker: dict[str, Any]) -> Optional[str]:
    """Why the process that wrote ``marker`` is known to be gone; None when it may still run (or is on another host)."""
    pid = marker.get("pid")
    if marker.get("host") != socket.gethostname():
        return None
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid < 2**31:
        return f"it names no process (pid {str(pid)[:20]!r})"
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


def request_capture(trace_dir: str, steps: Optional[int] = None) -> None:
    """Drop a request for one window of ``steps`` recorded steps (None: the callback's ``active``) in ``trace_dir``,
    a local folder or a URL."""
    data = json.dumps({"steps": steps, "requested": time.time()}).encode()
    if is_url(trace_dir):
        write(join(trace_dir, REQUEST), data)
    else:
        write_atomic(os.path.join(trace_dir, REQUEST), data)


def take_request(trace_dir: str) -> Optional[dict[str, Any]]:
    """Read and remove a pending request (None: none); another user's, a link or not a plain file is ``{"refused":
    why}``, more than :data:`MAX_STEPS` steps is ``capped``. A folder that cannot be read raises OSError."""
    path = os.path.join(trace_dir, REQUEST)
    try:
        text, refused = _read_own(path), None  # an OSError: the folder, not the request (gone, unreadable)
    except FileRefused as err:
        if not os.path.lexists(path):
            return None
        text, refused = b"", str(err)
    with contextlib.suppress(OSError):
        os.remove(path)
    if refused is not None:
        return {"refused": refused}
    steps = (marker_of(text) or {}).get("steps")  # unreadable or half-written by hand: a request, with defaults
    steps = steps if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else None
    if steps is not None and steps > MAX_STEPS:
        return {"steps": MAX_STEPS, "capped": steps}
    return {"steps": steps}


POLL_S = 1.0  # seconds of time.perf_counter between two looks for a request


class LiveRun:
    """Rank zero's live-run marker in its trace folder and the capture requests it takes there; :meth:`end`
    withdraws the marker, and the folders made for it that nothing was written into."""

    def __init__(self, trace_dir: str) -> None:
        self.created: list[str] = []  # the folders the marker needed, deepest first
        folder = os.path.abspath(trace_dir)
        while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
            self.created.append(folder)
            folder = os.path.dirname(folder)
        self.trace_dir = trace_dir
        pid = os.getpid()  # the marker names this process, by host, pid and start time, and this fit (a random id)
        self.run = {"pid": pid, "host": socket.gethostname(), "process_start": process_start(pid),
                    "started": time.time(), "fit": secrets.token_hex(8)}
        self.marker = os.path.join(trace_dir, MARKER)
        os.makedirs(trace_dir, exist_ok=True)
        write_atomic(self.marker, json.dumps(self.run).encode())
        atexit.register(self.end)  # where the fit does not end it
        take_request(trace_dir)  # a request left from an earlier run is stale
        self.next_poll = 0.0  # no look for a request before then (inf: polling stopped)

    def end(self) -> None:
        atexit.unregister(self.end)
        found = running(self.trace_dir)  # still this fit's? another fit may have written its own since
        if found is not None and found.get("fit") == self.run["fit"]:
            with contextlib.suppress(OSError):
                os.remove(self.marker)
        self.next_poll = float("inf")
        for folder in self.created:
            try:
                os.rmdir(folder)  # ours, and nothing was written into it
            except OSError:
                break


def requested_steps(live: LiveRun, now: float, active: int, report: Callable[..., None]
                    ) -> tuple[Optional[int], list[str]]:
    """The steps a request taken ``now``, where a poll is due, asks to record (None: no request to act on) and the
    lines to print; a folder that cannot be read is reported once, and stops the polling."""
    if now < live.next_poll:
        return None, []
    live.next_poll = now + POLL_S
    try:
        request = take_request(live.trace_dir)
    except OSError as err:
        live.next_poll = float("inf")
        report(f"cannot read capture requests:\n  {err!r}", "request")
        return None, []
    if request is None:
        return None, []
    if "refused" in request:
        report(f"a capture request was refused: only the user who runs the fit may ask it for a window\n  "
               f"{request['refused']}", "request_refused")
        return None, []
    lines = [f"a capture request asked for {request['capped']} steps; recording at most {MAX_STEPS}"
             ] if "capped" in request else []
    return request["steps"] or active, lines
