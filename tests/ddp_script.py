"""Run by test_ddp.py: 2-process DDP on CPU (gloo); rank 1's data is slower than rank 0's."""

import json
import os
import sys

import torch
from lightning.pytorch.loggers import CSVLogger

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import SleepDataset, TinyModel, make_trainer  # noqa: E402

from lightning_profkit import PerformanceMonitor  # noqa: E402


class RankDataset(SleepDataset):
    def __getitem__(self, i):
        self.delay = 0.001 if int(os.environ.get("LOCAL_RANK", "0")) == 0 else 0.006
        return super().__getitem__(i)


if __name__ == "__main__":
    root = sys.argv[1]
    torch.set_num_threads(1)
    def on_alert(alert):
        with open(os.path.join(root, f"alerts-rank{os.environ.get('LOCAL_RANK', '0')}.jsonl"), "a") as f:
            f.write(json.dumps(alert.as_dict()) + "\n")

    monitor = PerformanceMonitor(steps="3-5", alert_window=5, alert_patience=1, on_alert=on_alert)
    trainer = make_trainer(
        root, [monitor], max_epochs=2, accelerator="cpu", devices=2, strategy="ddp",
        logger=CSVLogger(root, name="csv"),
    )
    trainer.fit(TinyModel(RankDataset(40)))
