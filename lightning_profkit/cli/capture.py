"""``profkit capture RUN_DIR``: ask a running PerformanceMonitor to record a window now."""

from __future__ import annotations

import argparse
import glob
import os
from typing import Any, Optional

from lightning_profkit.cli.shared import CommandError, at_least_1, trace_dir_of
from lightning_profkit.printable import printable, redact
from lightning_profkit.store import is_url, join, subfolders


def steps_to_record(text: str) -> int:
    """``--steps`` of ``profkit capture``: 1 to the most a running callback records for one request."""
    from lightning_profkit.capture_request import MAX_STEPS

    value = at_least_1(text)
    if value > MAX_STEPS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_STEPS} (a window that long is already a large trace), "
                                         f"got {value}")
    return value


def add(sub: Any) -> None:
    p = sub.add_parser("capture", help="ask a running PerformanceMonitor to record a window now")
    p.add_argument("run_dir", help="the run folder (its profiler/ subfolder) or the trace folder itself")
    p.add_argument("--steps", type=steps_to_record, default=None,
                   help="steps to record, 1 to 100 (default: the callback's `active`)")
    p.set_defaults(handler=capture)


def capture(args: argparse.Namespace) -> int:
    from lightning_profkit import capture_request  # here: `profkit summary` starts faster without it

    if is_url(args.run_dir):
        folder, run = find_run([join(args.run_dir, "profiler"), args.run_dir.rstrip("/")])
        soon = "within a few seconds (the run looks on the store every 2 s)"
    else:
        (folder, run), soon = find_run([trace_dir_of(args.run_dir)]), "within about a second"
    if run is None:
        raise CommandError(f"{folder}: no running PerformanceMonitor writes traces here (no {capture_request.MARKER})")
    why = capture_request.not_running(run)
    if why is not None:
        raise CommandError(f"{folder}: the run that wrote {capture_request.MARKER} is not running ({why})")
    capture_request.request_capture(folder, args.steps)
    print(printable(f"requested a window of {args.steps or 'the configured'} steps from the run in {redact(folder)} "
                    f"(pid {run.get('pid')} on {str(run.get('host'))[:255]}); it starts {soon}"))
    return 0


def find_run(folders: list[str]) -> tuple[str, Optional[dict[str, Any]]]:
    """The first of the trace ``folders``, or else of the ``run=*`` folders in it (newest first, none through a link),
    whose fit runs, and its marker; else the first with a marker of a fit that ended; else the last folder and None.
    Markers are read up to the first running fit (one store read each)."""
    from lightning_profkit import capture_request

    ended: Optional[tuple[str, dict[str, Any]]] = None
    for folder in folders:
        owns = subfolders(folder, "run=") if is_url(folder) else [
            own for own in sorted(glob.glob(os.path.join(glob.escape(folder), "run=*"))) if not os.path.islink(own)]
        for own in [folder, *reversed(owns)]:
            marker = capture_request.running(own)
            if marker is None:
                continue
            if capture_request.not_running(marker) is None:
                return own, marker
            ended = ended or (own, marker)
    return ended or (folders[-1], None)
