"""What is written beside a trace and travels with it: its summary (``NAME.profkit``, see
:mod:`~lightning_profkit.trace.sidecar`) and its events as a table (``NAME.parquet``). Shared ground: the training
process moves, uploads and deletes them with their trace; the analysis side reads them."""

from __future__ import annotations

import os

SIDECAR = ".profkit"
EVENTS = ".parquet"
SUFFIXES = (SIDECAR, EVENTS)


def with_companions(trace: str) -> list[str]:
    """The paths (or URLs) of ``trace``'s companions, then ``trace``: uploaded in this order, so that a trace on a
    store has its companions once it is there."""
    return [trace + suffix for suffix in SUFFIXES] + [trace]


def remove_local(trace: str) -> bool:
    """Delete the local ``trace`` and its companions, those that are there; whether the trace itself was."""
    there = False
    for path in with_companions(trace):
        try:
            os.remove(path)
            there = there or path == trace
        except FileNotFoundError:
            pass
    return there
