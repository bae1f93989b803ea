"""Time per operator: CPU operators' inclusive and self (exclusive) time, and time per GPU kernel. Pure numpy."""

from __future__ import annotations

from typing import Any

import numpy as np

from lightning_profkit.trace import intervals
from lightning_profkit.trace import vocabulary as v
from lightning_profkit.trace.columns import Columns, code_mask

# host events nested by containment; runtime calls count as children so that an operator's self time
# leaves out the CUDA calls it makes (as torch's own tables do)
CPU_CATEGORIES = v.OPERATOR + (v.USER_ANNOTATION,) + v.HOST_CUDA


def _children_time(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For spans of one thread sorted by (start, -end), the summed duration of each span's direct children.

    Nesting by containment: a span's ancestors are the earlier spans still open at its start, so its depth
    is its index less the number of spans that ended by then; its descendants are the spans after it that
    start before it ends; the direct children are those one level deeper. Zero-length spans are left out
    by the caller (they have no time and cannot contain anything).
    """
    n = start.size
    # 32-bit positions and sums written in place: on a large trace this is the figures' peak of memory
    index = np.arange(n, dtype=np.int32)
    depth = index - np.searchsorted(np.sort(end), start, side="right").astype(np.int32)
    stop = np.searchsorted(start, end, side="left").astype(np.int32)  # first span starting at or after this one's end
    dur = end - start
    out = np.zeros(n)
    below = np.zeros(n + 1)
    for level in intervals.distinct(depth):
        at = np.flatnonzero(depth == level)
        np.cumsum(np.where(depth == level + 1, dur, 0.0), out=below[1:])
        out[at] = below[stop[at]] - below[at + 1]
    return out


def _by_name(codes: np.ndarray, names: list[str], **columns: np.ndarray) -> dict[str, dict[str, float]]:
    uniq, inverse = np.unique(codes, return_inverse=True)
    calls = np.bincount(inverse)
    sums = {k: np.bincount(inverse, weights=v) for k, v in columns.items()}
    return {names[code]: {"calls": int(calls[i]), **{k: float(v[i]) for k, v in sums.items()}} for i, code in enumerate(uniq)}


def operator_times(c: Columns) -> dict[str, dict[str, dict[str, Any]]]:
    """``{"cpu": {name: {calls, total_us, self_us}}, "device": {name: {calls, total_us}}}``.

    A CPU operator's self time is its duration less that of the operators directly inside it on the same
    thread (nesting by containment, as torch-tb-profiler and the autograd profiler build their trees).
    """
    steps = [i for i, n in enumerate(c.names) if v.is_step(n)]  # reported by the step breakdown
    cpu = np.flatnonzero(c.cat_mask(*CPU_CATEGORIES) & ~code_mask(c.name, steps, len(c.names)))
    # on the CPU rows only: a large trace's columns are most of memory
    start, end, thread = c.ts[cpu], c.end[cpu], c.thread[cpu]
    dur = end - start
    self_time = dur.copy()
    for t in intervals.distinct(thread):
        rows = np.flatnonzero((thread == t) & (dur > 0))
        rows = rows[np.lexsort((-end[rows], start[rows]))]
        self_time[rows] -= _children_time(start[rows], end[rows])
    del start, end, thread
    device = np.flatnonzero(c.cat_mask(*v.DEVICE))
    return {
        "cpu": _by_name(c.name[cpu], c.names, total_us=dur, self_us=self_time),
        "device": _by_name(c.name[device], c.names, total_us=c.end[device] - c.ts[device]),
    }


def top(table: dict[str, dict[str, float]], key: str, n: int = 10) -> list[dict[str, Any]]:
    """The ``n`` rows with the largest ``key``, as ``{"name": ..., **row}``."""
    rows = sorted(table.items(), key=lambda kv: -kv[1][key])[:n]
    return [{"name": name, **row} for name, row in rows]
