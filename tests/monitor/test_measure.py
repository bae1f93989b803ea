"""An epoch's measure: what profiling cost (the pure figures; inside a fit, exactly against a fake clock:
tests/monitor/test_fit.py; in a real fit against the test's clock and the reaped finalizing process's CPU:
tests/trainer/test_truth.py), the after-window notice (two slow epochs running, and on CPU none counted that were busy
with other work after their window), the epoch's validation runs, the share of a span the training thread waited for
a CPU."""

import time
from types import SimpleNamespace

import pytest

from lightning_profkit.monitor.timing.fetch_timer import FetchStats
from lightning_profkit.monitor.timing.measure import SLOW_AFTER, CpuWaitShares, EpochMeasure, _share, own_cost


def test_pure_figures():
    times = [1.0] * 10 + [3.0] * 3 + [2.0] * 10  # steps 100-122, the window 110-112
    got, baseline = own_cost(times, 100, [(110, 112)])
    assert got == {"overhead/profiled_step_ratio": 2.0, "overhead/after_window_ratio": 2.0}  # 3 / mean(1, 2)
    assert baseline == 1.0
    again, _ = own_cost([2.0] * 23, 100, [(110, 112)], baseline=1.0)  # later epochs: against the fit's baseline
    assert again["overhead/after_window_ratio"] == 2.0
    assert own_cost(times, 100, []) == ({}, None)
    waited, own = own_cost(times, 100, [(110, 112)], cpu_waits=(0.5, 0.75))  # the share waiting for a CPU, each side
    assert own == 0.5 and waited["overhead/after_window_ratio"] == 1.0  # 2 s * 0.25 / (1 s * 0.5)
    spent, _ = own_cost(times, 100, [(110, 112)], spent=[0.002, 0.004], helper_cpu_s=0.5)
    assert spent["overhead/window_ms"] == pytest.approx(3.0) and spent["overhead/helper_cpu_s"] == 0.5
    assert own_cost(times, 100, [], helper_cpu_s=0.0) == ({}, None)  # nothing used: absent, not 0
    assert own_cost(times, 100, [], helper_cpu_s=0.3) == ({"overhead/helper_cpu_s": 0.3}, None)  # a window's writing


def test_two_slow_epochs_running_are_counted_and_one_fast_epoch_resets_them():
    measure = EpochMeasure(lambda *args: None)
    measure.on_cuda = True
    for ratio, want in [(1.5, 1), (None, 1), (SLOW_AFTER["cuda"], 0), (1.2, 1), (1.3, 2), (0.9, 0)]:
        measure.after_window(ratio)
        assert measure.slow_epochs == want, (ratio, measure.slow_epochs)
    measure.on_cuda, measure.slow_epochs = False, 1
    measure.after_window(1.3)
    assert measure.slow_epochs == 0


def notices(ratios, busy_after, on_cuda=False):
    measure = EpochMeasure(lambda *args: None)
    measure.on_cuda = on_cuda
    said = []
    for ratio, busy in zip(ratios, busy_after):
        measure.busy_after = busy  # as the epoch's figures leave it
        said.append(measure.after_window(ratio) is not None)
    return said


def test_two_slow_epochs_running_give_the_notice_and_a_busy_machine_none():
    assert notices([2.0, 2.0, 2.0], [0.1, None, 0.2]) == [False, True, True]
    assert notices([2.0, 1.0, 2.0], [0.1, 0.1, 0.1]) == [False, False, False]  # not running
    assert notices([2.0, 2.0, 2.0], [0.8, 0.8, 0.1]) == [False, False, False]  # waiting for a CPU: not counted
    assert notices([1.2, 1.2], [0.8, 0.8], on_cuda=True) == [False, True]  # CUDA: counted, at its own limit


def test_the_measure_holds_the_epochs_validation_runs():
    measure = EpochMeasure(lambda *args: None)
    marks = iter([5.0, 6.0, 7.0])  # NVML's clock at the epoch's start and around the first run
    measure.sampler = SimpleNamespace(clear=lambda: next(marks), mark=lambda: next(marks))
    measure.epoch_start(100.0)
    assert measure.validation_end(101.0) == 0.0  # none open
    measure.validation_start(102.0)
    assert measure.validation_end(104.5) == 2.5
    measure.sampler = None  # no NVML marks around the second run
    measure.validation_start(110.0)
    assert measure.validation_end(111.0) == 1.0
    assert measure.validation == [(102.0, 104.5), (110.0, 111.0)] and measure.gpu_start == 5.0
    assert measure.gpu_validation == [(6.0, 7.0)]
    assert measure.figures(FetchStats(), 120.0, 0, [], [], None)["train_s"] == 20.0 - 3.5  # without the runs


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
