"""Does following the alert's advice lower the measured data wait? Two loaders that wait on their DataLoader on
this machine, each sample 10 ms and the step 1 ms, with 2 workers: one whose samples wait (a sleep, as on slow
storage or the network) and one whose samples compute (10 ms of CPU). Each runs as it is, then as the first
alert's advice says (I/O: more workers than CPUs; computing: cheaper samples, here half the CPU a sample),
interleaved, ``--repeats`` times; the script prints the advice and each run's data-wait ratio
(``profkit/data_wait_ratio``, the epoch's).

    python benchmarks/advice.py [--repeats 2] [--samples 400]
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402
from lightning.pytorch import LightningModule, Trainer  # noqa: E402
from lightning.pytorch.loggers import Logger  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from lightning_profkit import PerformanceMonitor  # noqa: E402
from lightning_profkit.machine import usable_cpus  # noqa: E402


class Samples(Dataset):
    """``size`` samples, each waiting ``wait`` seconds (a sleep) or computing ``burn`` seconds of CPU."""

    def __init__(self, size: int, wait: float = 0.0, burn: float = 0.0) -> None:
        self.size, self.wait, self.burn = size, wait, burn

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.wait)
        start = time.process_time()
        while time.process_time() - start < self.burn:
            pass
        return torch.full((8,), float(i))


class Model(LightningModule):
    def __init__(self, dataset: Dataset, workers: int) -> None:
        super().__init__()
        self.layer, self.dataset, self.workers = torch.nn.Linear(8, 1), dataset, workers

    def training_step(self, batch, batch_idx):
        time.sleep(0.001)
        return self.layer(batch).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return DataLoader(self.dataset, batch_size=2, num_workers=self.workers, persistent_workers=True)


class Kept(Logger):
    """Keeps the logged metrics."""

    name, version = "kept", 0

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, float]] = []

    @property
    def experiment(self):
        return None

    def log_hyperparams(self, *args, **kwargs) -> None:
        pass

    def log_metrics(self, metrics, step=None) -> None:
        self.rows.append(dict(metrics))


def run(dataset: Dataset, workers: int) -> tuple[float, list[str]]:
    """The epoch's data-wait ratio of one fit, and the first alert's advice."""
    alerts, kept = [], Kept()
    monitor = PerformanceMonitor(profile=False, capture_on_alert=False, alert_window=20, on_alert=alerts.append)
    with tempfile.TemporaryDirectory() as root, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Trainer(default_root_dir=root, max_epochs=1, logger=[kept], callbacks=[monitor], enable_progress_bar=False,
                enable_model_summary=False, enable_checkpointing=False, accelerator="cpu", devices=1,
                num_sanity_val_steps=0).fit(Model(dataset, workers))
    (ratio,) = [r["profkit/data_wait_ratio"] for r in kept.rows if "profkit/data_wait_ratio" in r]
    return ratio, alerts[0].advice if alerts else []


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--samples", type=int, default=400)
    args = parser.parse_args()
    n = args.samples
    cases = {
        "waiting on I/O": ((Samples(n, wait=0.01), 2), (Samples(n, wait=0.01), 4), "num_workers=4"),
        "computing": ((Samples(n, burn=0.01), 2), (Samples(n, burn=0.005), 2), "samples of half the CPU"),
    }
    print(f"# {datetime.date.today()}, {usable_cpus()} CPUs, {n} samples of 10 ms, step 1 ms, batch 2, "
          f"{args.repeats} interleaved repeats")
    print("| loader | advice (first alert, 2 workers) | data wait as it is | data wait, advice followed | ratio |")
    print("|---|---|---|---|---|")
    for name, (base, followed, what) in cases.items():
        before, after, advice = [], [], []
        for _ in range(args.repeats):
            ratio, said = run(*base)
            before.append(ratio)
            advice = advice or said
            after.append(run(*followed)[0])
        b, a = statistics.median(before), statistics.median(after)
        shown = (advice[0] if advice else "(no alert)").replace("|", "/")
        print(f"| {name} | {shown} | {b:.3f} | {a:.3f} ({what}) | {a / b:.2f} |")


if __name__ == "__main__":
    main()
