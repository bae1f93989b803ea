"""Interval arithmetic on numpy arrays. A *union* is a pair of sorted arrays (starts, ends) of disjoint spans."""

from __future__ import annotations

from typing import Sequence

import numpy as np

Union = tuple[np.ndarray, np.ndarray]
EMPTY: Union = (np.empty(0), np.empty(0))


def union(starts: Sequence[float], ends: Sequence[float]) -> Union:
    """Merge spans ``[starts[i], ends[i])`` into sorted, disjoint spans (touching spans merge)."""
    s = np.asarray(starts, dtype=np.float64)
    return union_where(s, np.asarray(ends, dtype=np.float64), np.ones(s.size, dtype=bool))


def union_where(starts: np.ndarray, ends: np.ndarray, mask: np.ndarray) -> Union:
    """:func:`union` of the spans where ``mask`` among the columns ``starts`` and ``ends``: sorted by their places,
    copied once (a large trace's spans are most of its rows)."""
    at = np.flatnonzero(mask)
    if not at.size:
        return EMPTY
    at = at[np.argsort(starts[at], kind="stable")]
    s, e = starts[at], ends[at]
    del at
    return _merged(s, e)


def _merged(s: np.ndarray, e: np.ndarray) -> Union:
    """The union of spans sorted by start."""
    reach = np.maximum.accumulate(e)
    heads = np.flatnonzero(np.append(True, s[1:] > reach[:-1]))
    tails = np.append(heads[1:] - 1, s.size - 1)
    return s[heads], reach[tails]


def union_by(groups: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`union` within each group at once: the merged spans' starts, ends and groups, by group then time. One
    sort whatever the groups: times become their ranks, so that (group, time) is one number whose running maximum
    does not cross from one group into the next."""
    n = starts.size
    if not n:
        return np.empty(0), np.empty(0), np.empty(0, dtype=np.int64)
    order = np.lexsort((starts, groups))
    times, rank = np.unique(np.concatenate([starts[order], ends[order]]), return_inverse=True)
    width = np.int64(times.size)
    keyed = groups[order].astype(np.int64) * width
    heads, tails = _merged(keyed + rank[:n], keyed + rank[n:])
    return times[heads % width], times[tails % width], heads // width


def covered_until(u: Union, at: np.ndarray) -> np.ndarray:
    """``|U ∩ (-inf, x]|`` for each ``x`` of ``at``: a search each."""
    starts, ends = u
    if not starts.size:
        return np.zeros(np.shape(at))
    widths = ends - starts
    before = np.concatenate([[0.0], np.cumsum(widths)])
    k = np.searchsorted(starts, at, side="right")  # the spans that start at or before x
    last = np.maximum(k - 1, 0)
    return np.where(k > 0, before[last] + np.clip(at - starts[last], 0.0, widths[last]), 0.0)

def distinct(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values (``np.unique`` without its import of ``numpy.ma``, 20 ms of start-up)."""
    s = np.sort(values)
    return s[np.append(True, s[1:] != s[:-1])] if s.size else s


def member(values: np.ndarray, test: np.ndarray) -> np.ndarray:
    """Where ``values`` is one of ``test``: ``np.isin`` by binary search, without importing ``numpy.ma``."""
    table = distinct(test)
    if table.size == 0:
        return np.zeros(values.shape, dtype=bool)
    at = np.minimum(np.searchsorted(table, values), table.size - 1)
    return table[at] == values


def length(u: Union) -> float:
    return float(np.sum(u[1] - u[0]))


def overlap(a: Union, b: Union) -> float:
    """``|A ∩ B|`` of two unions, as ``|A| + |B| - |A ∪ B|``."""
    return length(a) + length(b) - length(union(np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]])))


def covered(u: Union, bounds: np.ndarray) -> np.ndarray:
    """For each segment ``[bounds[j], bounds[j + 1])`` of sorted, distinct ``bounds`` among which lie all
    of ``u``'s ends, whether a span of ``u`` covers it: +1 at a span's first segment and -1 past its last,
    summed (``m log n`` for ``m`` spans and ``n`` bounds, where a search per segment is ``n log m``)."""
    n = bounds.size
    if u[0].size == 0 or n == 0:
        return np.zeros(max(n - 1, 0), dtype=bool)
    starts = np.bincount(np.searchsorted(bounds, u[0]), minlength=n)
    return np.cumsum(starts - np.bincount(np.searchsorted(bounds, u[1]), minlength=n))[:-1] > 0


def segments(within: Union, spans: list[Union]) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """The bounds of the segments between all ends of ``within`` and of ``spans``, which segments each of ``spans``
    covers (see :func:`covered`), and which ``within`` covers."""
    bounds = distinct(np.concatenate([*within, *(x for u in spans for x in u)]))
    return bounds, [covered(u, bounds) for u in spans], covered(within, bounds)
