"""The share of a span the training thread waited for a CPU, from the marks at its ends: plain values in."""

import time

import pytest

from lightning_profkit.monitor.timing.cpu_wait import CpuWaitShares, _share


def test_a_share_is_the_wait_over_the_span_between_two_marks():
    marks = [(10.0, 1.0), (12.0, 1.5), (13.0, 1.5), (17.0, 3.5)]  # (clock s, seconds waited so far)
    assert _share(marks, 0) == pytest.approx(0.25) and _share(marks, 2) == pytest.approx(0.5)
    assert _share(marks, 3) is None  # no mark after the last
    assert _share([(1.0, None), (2.0, 0.5)], 0) is None  # not measured
    assert _share([(2.0, 0.0), (2.0, 0.5)], 0) is None  # no time between them
    assert _share([(0.0, 0.0), (1.0, 3.0)], 0) == 1.0 and _share([(0.0, 1.0), (1.0, 0.0)], 0) == 0.0  # clipped


def test_only_the_first_windows_marks_are_kept_and_the_shares_read_the_os():
    shares = CpuWaitShares()
    shares.epoch_start(time.perf_counter())
    for _ in range(4):  # the first window's start and end, then a second window's
        shares.mark(time.perf_counter())
    before, after = shares.shares(time.perf_counter() + 0.01)
    assert len(shares._marks) == 3
    for share in (before, after):  # this thread hardly waited (None where the OS does not say)
        assert share is None or 0.0 <= share <= 1.0
