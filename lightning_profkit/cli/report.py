"""``profkit report RUN_DIR``: one self-contained HTML page of a run, readable offline and printable."""

from __future__ import annotations

import argparse
import os
from typing import Any

from lightning_profkit.atomic_files import write_atomic
from lightning_profkit.cli.shared import CommandError, add_jobs, exit_status, say, trace_dir_of
from lightning_profkit.cli.summary import read_here
from lightning_profkit.store import is_url
from lightning_profkit.opener import FileRefused


def add(sub: Any) -> None:
    p = sub.add_parser("report", help="one self-contained HTML page of a run, readable offline and printable")
    p.add_argument("run_dir", help="the run folder (the logger's log_dir, holding profiler/) or its profiler/ folder")
    p.add_argument("-o", "--output", default="report.html", help="the HTML file to write (default: report.html)")
    add_jobs(p)
    p.set_defaults(handler=report)


def report(args: argparse.Namespace) -> int:
    if is_url(args.run_dir):
        raise CommandError(f"{args.run_dir}: `profkit report` reads a local run folder; copy the run here first")
    trace_dir = trace_dir_of(args.run_dir)
    try:
        windows, left_out = read_here(trace_dir, args.jobs)
    except FileRefused:  # no trace: a run without windows still has its epochs
        windows, left_out = [], []
    from lightning_profkit.report.page import page
    from lightning_profkit.report.run_data import read_run

    data = read_run(args.run_dir)
    if data.source is None and os.path.abspath(trace_dir) == os.path.abspath(args.run_dir):  # given the profiler/ folder
        data = read_run(os.path.dirname(os.path.abspath(args.run_dir)))
    left_out += data.left_out
    if not data.epochs and not windows:
        exit_status(left_out)
        raise CommandError(f"{args.run_dir}: nothing to report: no epoch metrics of PerformanceMonitor in a logger's "
                           "files (TensorBoard or CSV) and no readable trace")
    out = os.path.abspath(args.output)
    text = page(args.run_dir, data, windows, os.path.dirname(out), trace_dir)
    try:
        write_atomic(out, text.encode("utf-8", "backslashreplace"))  # a file name that is not UTF-8: escaped
    except OSError as err:  # named by the user's path, not the temporary one written first
        named = args.output if os.path.abspath(args.output) == args.output else f"{args.output} ({out})"
        raise CommandError(f"{named}: cannot write the report: {err.strerror or err}") from None
    say(f"wrote {args.output}: {len(data.epochs)} epoch(s), {len(windows)} trace(s), {data.alert_count} alert(s)")
    return exit_status(left_out)
