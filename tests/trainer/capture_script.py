"""Run by test_alerts.py and test_store.py: a long metrics-only run that a separate process asks for a window. It
ends 2 s after the callback lists the window's trace (or after STEPS steps), so the tests need not wait out the
run."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, for conftest
from conftest import SleepDataset, TinyModel, make_trainer  # noqa: E402

from lightning.pytorch import Callback  # noqa: E402

from lightning_profkit import PerformanceMonitor  # noqa: E402


class Slow(TinyModel):
    def training_step(self, batch, batch_idx):
        time.sleep(0.005)
        return super().training_step(batch, batch_idx)


class StopAfterTheTrace(Callback):
    def __init__(self, monitor):
        self.monitor, self.seen = monitor, None

    def on_train_batch_end(self, trainer, *args):
        if self.monitor.traces and self.seen is None:
            self.seen = time.monotonic()
        if self.seen is not None and time.monotonic() > self.seen + 2:
            trainer.should_stop = True


if __name__ == "__main__":
    root = sys.argv[1]  # ROOT STEPS [DIRPATH]
    dirpath = sys.argv[3] if len(sys.argv) > 3 else None  # default: ROOT/profiler/run=... (no logger)
    monitor = PerformanceMonitor(profile=False, dirpath=dirpath, alert_threshold=None)
    make_trainer(root, [monitor, StopAfterTheTrace(monitor)], max_steps=int(sys.argv[2]), max_epochs=-1).fit(
        Slow(SleepDataset(4000)))
