"""Run by test_user_output.py: a fit as a user meets it, which waits on data (an alert) and whose steps slow down
after the first window (the after-window notice): 4 epochs of 40 steps into ``sys.argv[1]``."""

import sys
import time

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset

from lightning_profkit import PerformanceMonitor


class SlowData(TensorDataset):
    def __getitem__(self, i):
        if i % 16 == 0:  # 16 ms a batch, a stand-in for slow storage, in one sleep: each wake-up on a busy machine
            time.sleep(0.016)  # waits for a CPU, and epochs that wait over a quarter of their time are not counted
        return super().__getitem__(i)


class SlowerLater(LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(32, 1)

    def training_step(self, batch, batch_idx):
        if self.global_step > 14:  # after the first window (batches 11-13): a sleep, not a wait for a CPU
            time.sleep(0.03)
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


if __name__ == "__main__":
    data = DataLoader(SlowData(torch.randn(640, 32), torch.randn(640, 1)), batch_size=16)
    trainer = Trainer(max_epochs=4, callbacks=[PerformanceMonitor(alert_window=10)], enable_progress_bar=False,
                      logger=CSVLogger(sys.argv[1]), enable_model_summary=False, accelerator="cpu")
    trainer.fit(SlowerLater(), data)
