"""What every ``profkit`` command shares: the one-line input error, the exit status, the trace folder of a run,
a counting argument."""

from __future__ import annotations

import argparse
import os
import sys

from lightning_profkit.machine import usable_cpus
from lightning_profkit.printable import printable, redact

JOBS_HELP = "processes that decode a large trace (default: the CPU cores this process may use)"
LEFT_OUT = 3  # the exit status when some traces could not be read
SQL_NEEDS = "pip install duckdb pyarrow"


class CommandError(Exception):
    """A problem with the user's input: printed as one line, exit status 1."""


def at_least_1(text: str) -> int:
    """An argument that counts something: a whole number, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_jobs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=at_least_1, default=usable_cpus(), help=JOBS_HELP)


def trace_dir_of(path: str) -> str:
    """The folder a run's PerformanceMonitor writes to: ``PATH/profiler`` for a run folder, else PATH; a
    ``profiler`` that is a link is not followed (a folder is read only where it lies)."""
    if not os.path.isdir(path):
        raise CommandError(f"{path}: no such folder")
    nested = os.path.join(path, "profiler")
    if os.path.islink(nested):
        raise CommandError(f"{nested}: a symbolic link, not followed (give the folder it points to)")
    return nested if os.path.isdir(nested) else path


def exit_status(left_out: list[str]) -> int:
    """Name each trace that was left out, once, on stderr; the exit status."""
    for line in dict.fromkeys(left_out):
        say(f"{redact(line)}; left out")
    return LEFT_OUT if left_out else 0


def say(line: str) -> None:
    """One line of ``profkit``'s own on stderr, made safe for a terminal."""
    print(f"profkit: {printable(line)}", file=sys.stderr)
