"""What profiling cost a run: the pure figures, and the CPU off the training thread in a real fit against the reaped
finalizing process's. The figures inside a fit, exactly against a fake clock: tests/monitor/test_fit.py."""

import re
import resource
import time
import warnings

import pytest
from conftest import SleepDataset, TinyModel, WaitForTraces, make_trainer
from test_metrics import Recorder

from lightning_profkit import PerformanceMonitor
from lightning_profkit.monitor.timing.own_cost import SLOW_AFTER, own_cost, slow_epochs


class ClockedData(SleepDataset):
    """60 samples (30 steps of 2); the start of each step's fetch (its first sample, the sampler being
    sequential), the clock ``step_times`` is kept by, taken independently; and from step ``slow_from`` on,
    ``extra`` seconds more per step: the injected slowdown."""

    def __init__(self, slow_from=None, extra=0.0):
        super().__init__(60, delay=0.002)
        self.starts, self.slow_from, self.extra = [], slow_from, extra

    def __getitem__(self, i):
        if i % 2 == 0:
            self.starts.append(time.perf_counter())
            if self.slow_from is not None and len(self.starts) > self.slow_from:
                time.sleep(self.extra)
        return super().__getitem__(i)


def fit(tmp_path, data, epochs=3, wait_at=(), **options):
    recorder = Recorder()
    monitor = PerformanceMonitor(alert_threshold=None, **options)  # default windows: steps 11-13 of every epoch
    waiting = [WaitForTraces(monitor, epoch) for epoch in wait_at]  # windows written before these epochs start
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make_trainer(tmp_path, [monitor, *waiting], max_epochs=epochs, logger=[recorder], log_every_n_steps=1).fit(
            TinyModel(data))
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


def test_helper_cpu_s_is_in_every_epoch_and_adds_up_to_the_reaped_finalizing_process(tmp_path, caplog):
    """A window in each of 4 epochs, each written before the next epoch's first step (the finalizing process runs
    at idle priority: on a loaded machine it may get no CPU in the epoch its window ran): each epoch from the
    second on logs the CPU the writing used in it; those figures plus what the end-of-fit line says came after
    the last epoch's end add up to the reaped finalizing process's CPU (the writer thread's few ms on top)."""
    caplog.set_level("INFO")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    rows, _ = fit(tmp_path, ClockedData(), epochs=4, wait_at=[1, 2, 3])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    child = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    logged = [row.get("profkit/overhead/helper_cpu_s") for row in rows]
    assert len(logged) == 4 and all(v is not None and v > 0 for v in logged[1:]), logged
    (line,) = [r.getMessage() for r in caplog.records if "trace writing off the training thread used" in r.getMessage()]
    found = re.search(r"used ([0-9.]+) s of CPU on rank 0 .*?, ([0-9.]+) s of it after the last epoch's end", line)
    total, tail = float(found.group(1)), float(found.group(2))
    assert sum(v or 0.0 for v in logged) + tail == pytest.approx(total, abs=0.002), (logged, line)  # 3 decimals shown
    assert child - 0.05 < total < child + 0.1, (total, child)
