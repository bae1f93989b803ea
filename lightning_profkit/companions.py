"""What travels with a trace: its summary (``NAME.profkit``, :mod:`~lightning_profkit.trace.sidecar`) and its events
table (``NAME.parquet``), uploaded and deleted with it (docs/many-ranks.md)."""

from __future__ import annotations

import os

SIDECAR = ".profkit"
EVENTS = ".parquet"


def with_companions(trace: str) -> list[str]:
    """The paths (or URLs) of ``trace``'s companions, then ``trace``: a trace uploaded last has its companions."""
    return [trace + SIDECAR, trace + EVENTS, trace]


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
