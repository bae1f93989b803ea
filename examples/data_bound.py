"""A data-bound training run on synthetic data, profiled by PerformanceMonitor.

The Dataset sleeps a few milliseconds per sample (a stand-in for reading from slow storage: it waits, using no CPU) and the
DataLoader has no workers, so a large part of every step goes to waiting for data (how much depends on the
machine) and a data-wait alert fires in the second epoch.
Run it, then open TensorBoard with the command printed at the end: the PyTorch Profiler tab shows one run
per window, and its Overview puts the largest part of each step under "DataLoader".

    python examples/data_bound.py [--epochs 2] [--out runs/demo]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

import torch
from lightning.pytorch import LightningModule, Trainer, seed_everything
from lightning.pytorch.loggers import TensorBoardLogger
from torch.utils.data import DataLoader, Dataset

from lightning_profkit import PerformanceMonitor


class SlowDataset(Dataset):
    """Random features and targets; each sample costs ``delay`` seconds to 'load'."""

    def __init__(self, size: int = 2048, features: int = 64, delay: float = 0.0005) -> None:
        self.x = torch.randn(size, features)
        self.y = self.x.sum(dim=1, keepdim=True)
        self.delay = delay

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        time.sleep(self.delay)
        return self.x[i], self.y[i]


class Regressor(LightningModule):
    def __init__(self, features: int = 64) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(features, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--out", default="runs/demo", help="folder for logs and traces")
    args = parser.parse_args()

    seed_everything(0)
    loader = DataLoader(SlowDataset(), batch_size=32, num_workers=0, shuffle=True)
    logger = TensorBoardLogger(args.out, name="data_bound")
    monitor = PerformanceMonitor()  # defaults: skip 10 batches, warm up 1, record 3, in every epoch
    trainer = Trainer(
        max_epochs=args.epochs,
        logger=logger,
        callbacks=[monitor],
        log_every_n_steps=10,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="auto",
        devices=1,
    )
    trainer.fit(Regressor(), loader)

    print()
    print(f"Traces ({len(monitor.traces)} windows): {monitor.trace_dir}")
    for path in monitor.traces:  # in the order they were written
        print(f"  {path}")
    print(f"Metrics: {logger.log_dir}")
    print(f"Open them: tensorboard --logdir {os.path.abspath(logger.log_dir)} --host 127.0.0.1 --port 6006")
    print("  then http://127.0.0.1:6006/#pytorch_profiler (PyTorch Profiler tab)")
    print(f"One page of the run (offline HTML): profkit report {logger.log_dir} -o report.html")
    scripts = os.path.dirname(sys.executable)  # where pip put `profkit` and `tensorboard` for this Python
    if shutil.which("profkit") is None and os.path.exists(os.path.join(scripts, "activate")):
        print(f"(`profkit` and `tensorboard` are in {os.path.relpath(scripts)}: run `source "
              f"{os.path.relpath(os.path.join(scripts, 'activate'))}` first)")


if __name__ == "__main__":
    main()
