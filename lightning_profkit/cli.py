"""The ``profkit`` command.

    profkit capture RUN_DIR [--steps N]   ask a running PerformanceMonitor to record a window now
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from lightning_profkit import capture_request


class CommandError(Exception):
    """A problem with the user's input: printed as one line, exit status 1."""


def trace_dir_of(path: str) -> str:
    """The folder a run's PerformanceMonitor writes to: ``PATH/profiler`` for a run folder, else PATH."""
    if not os.path.isdir(path):
        raise CommandError(f"{path}: no such folder")
    nested = os.path.join(path, "profiler")
    return nested if os.path.isdir(nested) else path


def capture(args: argparse.Namespace) -> int:
    folder = trace_dir_of(args.run_dir)
    run = capture_request.running(folder)
    if run is None:
        raise CommandError(f"{folder}: no running PerformanceMonitor writes traces here (no {capture_request.MARKER})")
    capture_request.request_capture(folder, args.steps)
    print(f"requested a window of {args.steps or 'the configured'} steps from the run in {folder} "
          f"(pid {run.get('pid')} on {run.get('host')}); it starts within about a second")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="profkit", description="lightning_profkit's command line")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("capture", help="ask a running PerformanceMonitor to record a window now")
    p.add_argument("run_dir", help="the run folder (its profiler/ subfolder) or the trace folder itself")
    p.add_argument("--steps", type=int, default=None, help="steps to record (default: the callback's `active`)")
    p.set_defaults(run=capture)
    args = parser.parse_args(argv)
    if getattr(args, "steps", None) is not None and args.steps < 1:
        parser.error("--steps must be at least 1")
    try:
        return args.run(args)
    except CommandError as err:
        print(f"profkit: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"profkit: {err.filename or ''}: {err.strerror or err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
