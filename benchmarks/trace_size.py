"""How close ``max_trace_mb``'s estimate of a window's trace size comes to the real size.

While a window records, PerformanceMonitor estimates its trace from the growth of the memory malloc has in
use since recording began (glibc's ``mallinfo2``; resident memory elsewhere): the profiler's buffers grow
with its events. The first window of a fit takes a byte of growth for a byte of JSON (two with
``with_stack``); later ones use the ratio the fit's latest written window had. This script fits an MLP of several depths on CPU with several
profiler options, two epochs with a window of 3 recorded steps each (``max_trace_mb=None``, so nothing is
cut), and prints the estimate each trace's ``profkit`` key carries against the size of its JSON
(uncompressed; the file on disk is gzip).

    python benchmarks/trace_size.py [--layers 10 50 200] [--active 3]
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import tempfile
import time
import warnings

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

from lightning_profkit import PerformanceMonitor

OPTIONS = {
    "defaults": {},
    "record_shapes": {"record_shapes": True},
    "with_stack": {"with_stack": True},
    "record_shapes, with_stack, profile_memory": {"record_shapes": True, "with_stack": True, "profile_memory": True},
}


class MLP(LightningModule):
    def __init__(self, layers: int) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(layers)])

    def training_step(self, batch, batch_idx):
        return self.net(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(320, 64)), batch_size=16)


class FirstTraceWritten(Callback):
    """Epoch 1 starts once epoch 0's trace is written, so that the second window's estimate can use it (in a
    short fit the finalizing process, at idle priority, may not get a core before the fit's end)."""

    def __init__(self, monitor: PerformanceMonitor) -> None:
        self.monitor = monitor

    def on_train_epoch_start(self, trainer, pl_module):
        while trainer.current_epoch == 1 and not (self.monitor.traces or self.monitor._fit.output.has_written):
            time.sleep(0.01)


def windows(layers: int, options: dict, active: int) -> list[tuple[float, float]]:
    """(estimated MB, JSON MB) of the fit's two windows."""
    monitor = PerformanceMonitor(skip_first=5, active=active, alert_threshold=None, max_trace_mb=None, **options)
    with tempfile.TemporaryDirectory() as root, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Trainer(default_root_dir=root, max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                enable_progress_bar=False, enable_model_summary=False,
                callbacks=[monitor, FirstTraceWritten(monitor)]).fit(MLP(layers))
        out = []
        for path in monitor.traces:
            with gzip.open(path, "rb") as f:
                text = f.read()
            out.append((json.loads(text)["profkit"]["estimated_mb"], len(text) / 1e6))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[10, 50, 200])
    parser.add_argument("--active", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"trace size estimate, {datetime.date.today()}, torch {torch.__version__}, {args.active} recorded steps a window\n")
    print("| layers | profiler options | JSON MB | first window: estimated MB | JSON / estimate | second window: "
          "estimated MB | JSON / estimate |")
    print("|---|---|---|---|---|---|---|")
    for layers in args.layers:
        for name, options in OPTIONS.items():
            (e1, s1), (e2, s2) = windows(layers, options, args.active)
            print(f"| {layers} | {name} | {s1:.2f} | {e1:.2f} | {ratio(s1, e1)} | {e2:.2f} | {ratio(s2, e2)} |",
                  flush=True)


def ratio(json_mb: float, estimated_mb: float) -> str:
    return f"{json_mb / estimated_mb:.2f}" if estimated_mb else "- (no growth)"


if __name__ == "__main__":
    main()
