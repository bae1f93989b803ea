"""Run by test_alerts.py and test_store.py: a long metrics-only run that a separate process asks for a window."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import SleepDataset, TinyModel, make_trainer  # noqa: E402

from lightning_profkit import PerformanceMonitor  # noqa: E402


class Slow(TinyModel):
    def training_step(self, batch, batch_idx):
        time.sleep(0.005)
        return super().training_step(batch, batch_idx)


if __name__ == "__main__":
    root = sys.argv[1]  # ROOT STEPS [DIRPATH]
    dirpath = sys.argv[3] if len(sys.argv) > 3 else os.path.join(root, "profiler")
    monitor = PerformanceMonitor(profile=False, dirpath=dirpath, alert_threshold=None)
    make_trainer(root, [monitor], max_steps=int(sys.argv[2])).fit(Slow(SleepDataset(4000)))
