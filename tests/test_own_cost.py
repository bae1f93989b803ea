"""What profiling cost a run, logged every epoch: against step times taken independently, and the warning
when unprofiled steps stay slower after the windows (injected here) but not on a clean run."""

import time
import warnings

import pytest
from lightning.pytorch import Callback

from conftest import SleepDataset, TinyModel, make_trainer
from lightning_profkit import PerformanceMonitor
from lightning_profkit.monitor.own_cost import own_cost
from test_metrics import Recorder


class StepClock(Callback):
    """Each step's start (``on_train_batch_start``), and, from step ``slow_from`` on, ``extra`` seconds more
    per step: the independent timing, and the injected slowdown."""

    def __init__(self, slow_from=None, extra=0.0):
        self.starts, self.slow_from, self.extra = {}, slow_from, extra

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        step = trainer.fit_loop.epoch_loop.total_batch_idx
        self.starts[step] = time.perf_counter()
        if self.slow_from is not None and step >= self.slow_from:
            time.sleep(self.extra)


def fit(tmp_path, clock, epochs=3):
    recorder = Recorder()
    monitor = PerformanceMonitor(alert_threshold=None)  # default windows: steps 11-13 of every epoch
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make_trainer(tmp_path, [monitor, clock], max_epochs=epochs, logger=[recorder], log_every_n_steps=1).fit(
            TinyModel(SleepDataset(60, delay=0.002)))  # 30 steps an epoch
    rows = [m for _, m in recorder.rows if "profkit/data_wait_ratio" in m]
    return rows, [str(w.message) for w in caught if "after_window_ratio" in str(w.message)]


def test_pure_figures():
    times = [1.0] * 10 + [3.0] * 3 + [2.0] * 10  # steps 100-122, the window 110-112
    got, baseline = own_cost(times, 100, [(110, 112)])
    assert got == {"overhead/profiled_step_ratio": 2.0, "overhead/after_window_ratio": 2.0}  # 3 / mean(1, 2)
    assert baseline == 1.0
    again, _ = own_cost([2.0] * 23, 100, [(110, 112)], baseline=1.0)  # later epochs: against the fit's baseline
    assert again["overhead/after_window_ratio"] == 2.0
    assert own_cost(times, 100, []) == ({}, None)


def test_a_clean_run_reads_about_one_and_the_profiled_steps_match_an_independent_timing(tmp_path):
    clock = StepClock()
    rows, warned = fit(tmp_path, clock)
    assert len(rows) == 3 and warned == []
    for epoch, row in enumerate(rows):
        assert 0.8 < row["profkit/overhead/after_window_ratio"] < 1.2, rows
        first = 30 * epoch
        step = {s: clock.starts[s + 1] - clock.starts[s] for s in range(first, first + 29)}
        on = [step[s] for s in range(first + 10, first + 14)]  # the warm-up step and the 3 recorded
        off = [t for s, t in step.items() if not first + 10 <= s <= first + 13]
        truth = (sum(on) / len(on)) / (sum(off) / len(off))
        assert row["profkit/overhead/profiled_step_ratio"] == pytest.approx(truth, rel=0.15), (rows, truth)


def test_steps_slower_after_the_window_warn_once(tmp_path):
    clock = StepClock(slow_from=20, extra=0.01)  # after epoch 0's window (steps 10-13), 10 ms more a step
    rows, warned = fit(tmp_path, clock)
    assert all(row["profkit/overhead/after_window_ratio"] > 1.5 for row in rows), rows
    assert len(warned) == 1 and "TEARDOWN_CUPTI" in warned[0]
