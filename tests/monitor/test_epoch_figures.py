"""The epoch's figures from plain timings and the ranks' reduction, without a Trainer."""


import pytest

from lightning_profkit.monitor.alerting.checks import BlockFigures
from lightning_profkit.monitor.timing.epoch_figures import epoch_figures, reduce_ranks, rolling_metrics
from lightning_profkit.monitor.timing.fetch_timer import FetchStats


def stats(waits, steps, first_fetch=None):
    s = FetchStats()
    s.train_s, s.train_count, s.first_fetch = sum(waits), len(waits), first_fetch
    s.recent_steps.extend(steps)
    return s


def test_figures_of_an_epoch():
    got = epoch_figures(stats([0.5, 0.5], [1.0, 3.0], first_fetch=12.0), 10.0, 20.0, 2.0, 4, 3_000_000, 0.25)
    assert got == {"train_s": 8.0, "data_wait_s": 1.0, "data_wait_ratio": 0.125, "samples_per_s": 1.0,
                   "step_time_ms_mean": 2000.0, "step_time_ms_p90": pytest.approx(2800.0),
                   "dataloader_startup_s": 2.0, "peak_memory_mb": 3.0, "gpu_idle_ratio": 0.25}


def test_what_cannot_be_known_is_absent_not_zero():
    got = epoch_figures(stats([], []), 10.0, 10.0, 0.0, None, None)
    assert got == {"train_s": 0.0, "data_wait_s": 0.0}


def test_ranks_are_reduced_by_the_mean_the_largest_and_the_worst():
    a, b = {"data_wait_ratio": 0.1, "peak_memory_mb": 100.0}, {"data_wait_ratio": 0.3}
    got = reduce_ranks([a, b])
    assert got["profkit/data_wait_ratio"] == pytest.approx(0.2)
    assert got["profkit/peak_memory_mb"] == 100.0  # the largest, of the ranks that have it
    assert got["profkit/data_wait_ratio_max"] == 0.3 and got["profkit/data_wait_worst_rank"] == 1.0
    assert "profkit/data_wait_ratio_max" not in reduce_ranks([a])  # one rank: no worst rank
    assert "profkit/gpu_idle_ratio" not in got


def test_rolling_metrics_of_a_check():
    blocks = [BlockFigures(1.0, 4.0, 0.0), BlockFigures(3.0, 4.0, 0.0), BlockFigures(0.0, 0.0, 0.0)]
    got = rolling_metrics(blocks, 10)  # the third rank did not train
    assert got == {"profkit/rolling/data_wait_ratio": 0.5, "profkit/rolling/step_time_ms": 400.0,
                   "profkit/rolling/data_wait_ratio_max": 0.75}
    assert rolling_metrics([BlockFigures(0.0, 0.0, 0.0)], 10) == {}


def test_fetch_stats_close_a_step_once_and_leave_validation_out():
    s = FetchStats()
    s.step_start, s.steps_done = 10.0, 4
    s.exclude(2.0)  # a validation run of 2 s after the step
    s.end_step(15.0, 5)
    s.end_step(16.0, 5)  # closed already
    assert list(s.step_times) == [3.0]
    s.step_start, s.steps_done = 20.0, 5
    s.end_step(21.0, 5)  # the step had not completed: not a step
    assert list(s.step_times) == [3.0]


def test_an_epochs_figures_import_nothing_on_the_training_thread():
    """The p90 step time is ours, not numpy's quantile: its first call imports numpy.ma (10 ms of a fit's training
    thread, once a process)."""
    import subprocess
    import sys

    code = ("import sys, torch\n"
            "from lightning_profkit.monitor.timing.epoch_figures import epoch_figures\n"
            "from lightning_profkit.monitor.timing.fetch_timer import FetchStats\n"
            "s = FetchStats(); s.recent_steps.extend([0.001 * i for i in range(250)])\n"
            "before = set(sys.modules)\n"
            "assert 'step_time_ms_p90' in epoch_figures(s, 0.0, 1.0, 0.0, 32, None)\n"
            "print(sorted(set(sys.modules) - before))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]"]
