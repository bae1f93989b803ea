"""What profiling cost a run, the pure figures. Inside a fit, exactly against a fake clock: tests/monitor/test_fit.py;
in a real fit against the test's clock and the reaped finalizing process's CPU: tests/trainer/test_truth.py."""

import pytest

from lightning_profkit.monitor.timing.own_cost import SLOW_AFTER, own_cost, slow_epochs


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
    running = 0
    for ratio, want in [(1.5, 1), (None, 1), (SLOW_AFTER["cuda"], 0), (1.2, 1), (1.3, 2), (0.9, 0)]:
        running = slow_epochs(running, ratio, SLOW_AFTER["cuda"])
        assert running == want, (ratio, running)
    assert slow_epochs(1, 1.3, SLOW_AFTER["cpu"]) == 0
