"""Time per operator: CPU operators' inclusive and self (exclusive) time, and time per GPU kernel. Pure numpy."""

from __future__ import annotations

from typing import Any

import numpy as np

from lightning_profkit.trace import intervals, vocabulary as v
from lightning_profkit.trace.columns import Columns

# host events nested by containment; runtime calls count as children so that an operator's self time
# leaves out the CUDA calls it makes (as torch's own tables do)
CPU_CATEGORIES = v.OPERATOR + (v.USER_ANNOTATION,) + v.HOST_CUDA


CHUNK = 2**16  # spans whose self times are computed at once: what bounds the temporaries


def self_times(thread: np.ndarray, start: np.ndarray, end: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The spans ``rows`` (of positive length) of the columns ``thread``, ``start`` and ``end``: each one's duration
    less that of its direct children, the spans of its thread nested in it by containment. Sorted once, then about
    :data:`CHUNK` spans at a time in sorts and searches: ``n log n`` whatever the threads and depths, with
    temporaries of a chunk's size (on a large trace they were the figures' peak of memory)."""
    longest_first = end[rows]
    order = np.lexsort((np.negative(longest_first, out=longest_first), start[rows], thread[rows]))
    del longest_first
    out = np.empty(rows.size)
    edges = _chunks(thread, start, end, rows, order).tolist()
    for a, b in zip(edges[:-1], edges[1:]):
        at = rows[order[a:b]]
        out[order[a:b]] = _self_times_sorted(thread[at], start[at], end[at])
    return out


def _chunks(thread: np.ndarray, start: np.ndarray, end: np.ndarray, rows: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Where the spans ``rows[order]`` (sorted as :func:`self_times` sorts them) are cut into chunks of about
    :data:`CHUNK`: where a thread starts, and in a thread of more spans, before spans that none before them is still
    open at (an end at a start has ended), so that each span's parent is in its chunk."""
    threads = thread[rows][order]
    firsts = np.flatnonzero(np.append(True, threads[1:] != threads[:-1]))
    del threads
    lasts = np.append(firsts[1:], rows.size)
    cuts = [firsts]
    long = lasts - firsts > CHUNK
    for a, b in zip(firsts[long].tolist(), lasts[long].tolist()):
        at = rows[order[a:b]]
        reach = np.maximum.accumulate(end[at])
        free = a + np.flatnonzero(np.append(True, start[at][1:] >= reach[:-1]))
        cuts.append(free[np.searchsorted(free, np.arange(a, b, CHUNK), side="right") - 1])
    cut = intervals.distinct(np.concatenate(cuts))
    return np.append(intervals.distinct(cut[np.searchsorted(cut, np.arange(0, rows.size, CHUNK), side="right") - 1]),
                     rows.size)


def _self_times_sorted(thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """:func:`self_times` of spans sorted by (thread, start, longest first): a span's depth is the number of its
    thread's spans before it still open at its start, and its parent the last span before it one level up, on its
    thread."""
    n = start.size
    # each time's place among all ends and starts, ends first where equal (an end at a start has ended by then), as
    # one number with its thread's: (thread, place) sorts as thread, then time
    by = np.argsort(np.concatenate([end, start]), kind="stable")
    place = np.empty(2 * n, dtype=np.int32 if 2 * n < 2**31 else np.int64)
    place[by] = np.arange(2 * n, dtype=place.dtype)
    del by
    group = (thread - thread[0]).astype(np.int64) * (2 * n)
    ends = np.sort(group + place[:n])
    opened = np.searchsorted(ends, group + place[n:]) - np.searchsorted(ends, group)  # of its thread, ended by then
    del place, ends, group
    index = np.arange(n)
    depth = index - np.searchsorted(thread, thread) - opened  # spans of its thread before it, less those ended
    del opened
    keys = np.sort(depth * n + index)  # by depth, then place
    j = np.searchsorted(keys, (depth - 1) * n + index) - 1  # the last key before this place one level up
    found = keys[np.maximum(j, 0)]
    del keys
    parent = found % n
    has = (depth > 0) & (j >= 0) & (found // n == depth - 1) & (thread[parent] == thread)
    dur = end - start
    return dur - np.bincount(parent[has], weights=dur[has], minlength=n)


def _by_name(codes: np.ndarray, names: list[str], **columns: np.ndarray) -> dict[str, dict[str, float]]:
    calls = np.bincount(codes, minlength=len(names))
    sums = {k: np.bincount(codes, weights=v, minlength=len(names)) for k, v in columns.items()}
    return {names[code]: {"calls": int(calls[code]), **{k: float(v[code]) for k, v in sums.items()}}
            for code in np.flatnonzero(calls).tolist()}


def operator_times(c: Columns) -> dict[str, dict[str, dict[str, Any]]]:
    """``{"cpu": {name: {calls, total_us, self_us}}, "device": {name: {calls, total_us}}}``; self time as
    torch-tb-profiler and the autograd profiler nest operators (see :func:`self_times`)."""
    cpu = np.flatnonzero(c.cat_mask(*CPU_CATEGORIES) & ~c.name_mask(v.is_step))  # steps: the step breakdown's
    names, dur = c.name[cpu], c.end[cpu] - c.ts[cpu]
    timed = dur > 0
    cpu = cpu[timed]
    found = self_times(c.thread, c.ts, c.end, cpu)
    self_time = dur.copy()  # made after: self_times' temporaries are the peak
    self_time[timed] = found
    device = np.flatnonzero(c.cat_mask(*v.DEVICE))
    return {
        "cpu": _by_name(names, c.names, total_us=dur, self_us=self_time),
        "device": _by_name(c.name[device], c.names, total_us=c.end[device] - c.ts[device]),
    }


def top(table: dict[str, dict[str, float]], key: str, n: int = 10) -> list[dict[str, Any]]:
    """The ``n`` rows with the largest ``key``, as ``{"name": ..., **row}``."""
    rows = sorted(table.items(), key=lambda kv: -kv[1][key])[:n]
    return [{"name": name, **row} for name, row in rows]
