"""Union, length, overlap and coverage of spans."""

import numpy as np

from lightning_profkit.trace import intervals


def as_pairs(u):
    return [(float(s), float(e)) for s, e in zip(*u)]


def test_interval_math():
    u = intervals.union([5, 0, 1, 7], [7, 2, 3, 8])
    assert as_pairs(u) == [(0, 3), (5, 8)]
    assert intervals.length(u) == 6
    assert intervals.overlap(u, intervals.union([2], [6])) == 2
    bounds = np.array([-1, 0, 2.5, 3, 5, 7.9, 8])  # u's ends among them
    assert intervals.covered(u, bounds).tolist() == [False, True, True, False, True, True]
    assert intervals.covered(intervals.EMPTY, bounds).tolist() == [False] * 6
    assert as_pairs(intervals.union([], [])) == [] and intervals.overlap(intervals.EMPTY, u) == 0


def test_a_union_where_a_mask_is_that_of_the_spans_it_picks():
    rng = np.random.default_rng(3)
    starts = rng.integers(0, 50, 400).astype(float)
    ends = starts + rng.integers(0, 6, 400)
    mask = rng.random(400) < 0.3
    assert as_pairs(intervals.union_where(starts, ends, mask)) == as_pairs(intervals.union(starts[mask], ends[mask]))
    assert as_pairs(intervals.union_where(starts, ends, np.zeros(400, dtype=bool))) == []
