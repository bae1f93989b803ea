"""Long runs: many windows in one process, bounded memory, no handle or thread build-up, retention."""

import gc
import os
import threading

from conftest import SleepDataset, TinyModel, leftovers, make_trainer, trace_files
from lightning.pytorch import Callback

from lightning_profkit import PerformanceMonitor
from lightning_profkit.monitor.profiling.windows import WindowSession


def rss_mb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


class Gauge(Callback):
    """RSS, threads and open files every 50 steps."""

    def __init__(self):
        self.rows = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.fit_loop.epoch_loop.total_batch_idx
        if step % 50 == 49:
            self.rows.append((step, rss_mb(), threading.active_count(), len(os.listdir("/proc/self/fd"))))


def test_200_windows_bounded_memory_handles_and_threads(tmp_path):
    # a window every 2 steps of about 5 ms outruns the writer (a child process of about 0.35 s a window
    # here): the fit's end waits for the backlog, longer than the default flush_timeout on a slow machine
    monitor = PerformanceMonitor(every_n_steps=2, warmup=0, active=1, alert_threshold=None, keep_last_windows=20,
                                 flush_timeout=600)
    gauge = Gauge()
    make_trainer(tmp_path, [monitor, gauge], max_steps=400, max_epochs=-1).fit(TinyModel(SleepDataset(800)))
    assert len(monitor.traces) == 20  # the newest 20 of 199 windows are kept
    folders = sorted(f for f in os.listdir(monitor.trace_dir) if not f.startswith("."))
    assert len(folders) == 20 and folders == sorted(os.path.basename(os.path.dirname(p)) for p in monitor.traces)
    assert len(trace_files(tmp_path)) == 20 and leftovers(tmp_path) == []
    (_, rss_start, threads_start, fds_start), *_, (_, rss_end, threads_end, fds_end) = gauge.rows
    per_window = (rss_end - rss_start) / 150 * 1024  # KiB, 150 windows between the two readings
    print(f"RSS growth per window: {per_window:.0f} KiB")
    assert per_window < 512, gauge.rows  # torch keeps ~170 KiB per session here (pytorch/pytorch#193348); a kept trace is MBs
    assert threads_end <= threads_start and abs(fds_end - fds_start) <= 4, gauge.rows
    gc.collect()
    assert not [o for o in gc.get_objects() if isinstance(o, WindowSession)]  # nothing of ours is kept
