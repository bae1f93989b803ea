"""How close ``max_trace_mb``'s estimate of a window's trace size comes to the real size.

A window's estimate is the JSON a recorded step of the fit's latest written window of its kind (its JSON over its
recorded steps) times the steps it has recorded; a fit's first window has none. This script fits an MLP of several
depths on CPU with several profiler options, an epoch of 20 steps a window (``--windows``: the recorded steps of each,
3, 3, 1 and 10 by default, so that a window is estimated from one as long, one longer and one shorter), with
``max_trace_mb=None`` (nothing is cut), and prints, for each window after the first, its JSON (uncompressed; the
file on disk is gzip) over the estimate in its trace's ``profkit`` key.

    python benchmarks/trace_size.py [--layers 10 50 200] [--windows 3 3 1 10]
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
EPOCH_STEPS = 20  # 320 samples in batches of 16
FIRST = 5  # each epoch's window records from its 5th step


class MLP(LightningModule):
    def __init__(self, layers: int) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(layers)])

    def training_step(self, batch, batch_idx):
        return self.net(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(EPOCH_STEPS * 16, 64)), batch_size=16)


class TracesWritten(Callback):
    """Each epoch starts once the windows before it are written, so that its window's estimate uses the latest (in
    a short fit the finalizing process, at idle priority, may not get a core in time)."""

    def __init__(self, monitor: PerformanceMonitor) -> None:
        self.monitor = monitor

    def on_train_epoch_start(self, trainer, pl_module):
        output = self.monitor._fit.output
        while output._writer is not None and output._writer.pending:
            time.sleep(0.01)


def windows(layers: int, options: dict, lengths: list[int]) -> list[tuple[float, float]]:
    """(estimated MB or 0 where none, JSON MB) of the fit's windows, one an epoch of ``lengths[e]`` steps."""
    steps = ",".join(f"{EPOCH_STEPS * e + FIRST}-{EPOCH_STEPS * e + FIRST + n - 1}" for e, n in enumerate(lengths))
    monitor = PerformanceMonitor(steps=steps, alert_threshold=None, max_trace_mb=None, **options)
    with tempfile.TemporaryDirectory() as root, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Trainer(default_root_dir=root, max_epochs=len(lengths), accelerator="cpu", logger=False,
                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                callbacks=[monitor, TracesWritten(monitor)]).fit(MLP(layers))
        out = []
        for path in sorted(monitor.traces):
            with gzip.open(path, "rb") as f:
                text = f.read()
            out.append((json.loads(text)["profkit"].get("estimated_mb", 0.0), len(text) / 1e6))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[10, 50, 200])
    parser.add_argument("--windows", type=int, nargs="+", default=[3, 3, 1, 10], help="recorded steps of each window")
    args = parser.parse_args()
    torch.set_num_threads(1)
    n = args.windows
    print(f"trace size estimate, {datetime.date.today()}, torch {torch.__version__}, windows of {n} recorded steps\n")
    later = [f"{n[i]} from {n[i - 1]}: estimated MB | JSON / estimate" for i in range(1, len(n))]
    print(f"| layers | profiler options | first window: JSON MB | {' | '.join(later)} |")
    print("|---|---|---|" + "---|---|" * len(later))
    ratios: list[float] = []
    for layers in args.layers:
        for name, options in OPTIONS.items():
            (_, first), *rest = windows(layers, options, n)
            ratios += [size / estimate for estimate, size in rest if estimate]
            cells = [f"{estimate:.2f} | {ratio(size, estimate)}" for estimate, size in rest]
            print(f"| {layers} | {name} | {first:.2f} | {' | '.join(cells)} |", flush=True)
    if ratios:
        print(f"\nJSON / estimate over the windows after the first: {min(ratios):.2f}-{max(ratios):.2f}")


def ratio(json_mb: float, estimated_mb: float) -> str:
    return f"{json_mb / estimated_mb:.2f}" if estimated_mb else "- (no estimate)"


if __name__ == "__main__":
    main()
