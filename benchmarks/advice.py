"""Does following the alert's advice cut the data wait most? Loaders with a known bottleneck each run as they are,
then with the first alert's first advice line applied as written (parsed: ``num_workers=N``,
``persistent_workers=True``, ``prefetch_factor=N``, ``batch_size=N``, fewer larger tensors, cheaper samples, each
worker its own shard), then with the main alternative (more workers; where the advice is more workers, cheaper
samples). Each configuration is a fresh fit of the same samples, the three interleaved, ``--repeats`` times; printed:
the advice and the fit's data wait (``profkit/data_wait_s`` summed over its epochs, s) in each, the median.

The advice is right when its fix cuts the data wait most, or by at least half where no alternative applies; a
compute-bound step is right when no alert fires.

    python benchmarks/advice.py [--repeats 2] [--cases NAME,...]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import re
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from typing import Any, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402
from lightning.pytorch import LightningModule, Trainer  # noqa: E402
from lightning.pytorch.loggers import Logger  # noqa: E402
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info  # noqa: E402

from lightning_profkit import PerformanceMonitor  # noqa: E402
from lightning_profkit.machine import usable_cpus  # noqa: E402


@dataclass(frozen=True)
class Setup:
    """A loader with a known bottleneck, and the step it feeds."""

    samples: int = 240
    wait: float = 0.0  # seconds each sample sleeps (storage, the network)
    burn: float = 0.0  # CPU seconds each sample computes
    stall_every: int = 0  # every this many samples one sleeps ``stall`` s
    stall: float = 0.0
    parts: int = 1  # tensors of 4 floats a sample
    stacked: bool = False  # the same numbers in one tensor a sample
    iterable: bool = False  # an IterableDataset
    sharded: bool = True  # (iterable) each worker reads its own shard
    start_s: float = 0.0  # seconds each worker takes to start (opening files, connections)
    workers: int = 2
    persistent: bool = True
    prefetch: int = 2
    batch_size: int = 4
    step_s: float = 0.001  # CPU seconds of each training step
    epochs: int = 1

    def loader(self) -> DataLoader:
        data = (ShardedStream if self.sharded else Stream)(self) if self.iterable else Samples(self)
        extra = dict(persistent_workers=self.persistent, prefetch_factor=self.prefetch,
                     worker_init_fn=_starting(self.start_s)) if self.workers else {}
        return DataLoader(data, batch_size=self.batch_size, num_workers=self.workers, **extra)


def _burn(seconds: float) -> None:
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass


def _sample(setup: Setup, i: int) -> Any:
    time.sleep(setup.wait + (setup.stall if setup.stall_every and i % setup.stall_every == 0 else 0.0))
    _burn(setup.burn)
    if setup.parts > 1 and not setup.stacked:
        return {f"t{k}": torch.full((4,), float(i)) for k in range(setup.parts)}
    return torch.full((4 * setup.parts,), float(i))


class Samples(Dataset):
    def __init__(self, setup: Setup) -> None:
        self.setup = setup

    def __len__(self) -> int:
        return self.setup.samples

    def __getitem__(self, i: int) -> Any:
        return _sample(self.setup, i)


class Stream(IterableDataset):
    """Every sample in each worker: an ``__iter__`` that never asks ``get_worker_info()``."""

    def __init__(self, setup: Setup) -> None:
        self.setup = setup

    def __iter__(self):
        for i in range(self.setup.samples):
            yield _sample(self.setup, i)


class ShardedStream(Stream):
    """Each worker its own samples."""

    def __iter__(self):
        info = get_worker_info()
        first, step = (info.id, info.num_workers) if info is not None else (0, 1)
        for i in range(first, self.setup.samples, step):
            yield _sample(self.setup, i)


class _starting:
    """A worker's start-up of ``seconds`` (picklable, for spawned workers too)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, worker_id: int) -> None:
        time.sleep(self.seconds)


class Model(LightningModule):
    def __init__(self, step_s: float) -> None:
        super().__init__()
        self.layer, self.step_s = torch.nn.Linear(4, 1), step_s

    def training_step(self, batch, batch_idx):
        _burn(self.step_s)
        x = torch.cat([t.reshape(-1, 4) for t in batch.values()]) if isinstance(batch, dict) else batch.reshape(-1, 4)
        return self.layer(x).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


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


def run(setup: Setup) -> tuple[float, list[str]]:
    """The fit's data wait (s, every epoch's) and the first alert's advice."""
    alerts, kept = [], Kept()
    monitor = PerformanceMonitor(profile=False, capture_on_alert=False, alert_window=20, on_alert=alerts.append)
    with tempfile.TemporaryDirectory() as root, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Trainer(default_root_dir=root, max_epochs=setup.epochs, logger=[kept], callbacks=[monitor],
                enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False, accelerator="cpu",
                devices=1, num_sanity_val_steps=0).fit(Model(setup.step_s), setup.loader())
    waited = sum(r["profkit/data_wait_s"] for r in kept.rows if "profkit/data_wait_s" in r)
    return waited, alerts[0].advice if alerts else []


def follow(setup: Setup, line: str) -> Optional[Setup]:
    """``setup`` with the advice ``line`` applied as written; None where it names nothing this benchmark can change.
    A line either says what to try (``try num_workers=4``) or starts with the setting to change and why
    (``prefetch_factor=4: …``; ``batch_size=2: … a larger batch spreads them``: 8)."""
    changes: dict[str, Any] = {}
    tried = re.search(r"\btry num_workers=(\d+)", line)
    lead = re.match(r"(\w+)=(\w+): ", line)
    if tried:
        changes["workers"] = int(tried.group(1))
    elif lead and lead.group(1) == "prefetch_factor":
        changes["prefetch"] = int(lead.group(2))
    elif lead and lead.group(1) == "batch_size":
        changes["batch_size"] = max(8, 2 * int(lead.group(2)))
    if "persistent_workers=True" in line:
        changes["persistent"] = True
    if "fewer, larger tensors" in line:
        changes["stacked"] = True
    if "__getitem__ cheaper" in line:
        changes.update(burn=setup.burn / 2, wait=setup.wait / 2)
    if "shard it first" in line:
        changes["sharded"] = True
    return dataclasses.replace(setup, **changes) if changes else None


def alternative(setup: Setup, advised: Optional[Setup]) -> Setup:
    """More workers; where the advice already adds them, cheaper samples."""
    if advised is not None and advised.workers > setup.workers:
        return dataclasses.replace(setup, burn=setup.burn / 2, wait=setup.wait / 2)
    return dataclasses.replace(setup, workers=max(2 * setup.workers, 2))


CPUS = usable_cpus()
CASES = {
    "workers computing on every CPU": Setup(burn=0.01, workers=CPUS),
    "the training process decoding with no workers": Setup(burn=0.01, workers=0),
    "workers waiting on storage": Setup(wait=0.01),
    "rare long stalls": Setup(samples=400, stall_every=100, stall=0.5, step_s=0.004),
    "workers restarting every epoch": Setup(samples=48, wait=0.002, start_s=0.5, persistent=False, epochs=4),
    "an iterable its workers do not shard": Setup(wait=0.01, iterable=True, sharded=False),
    "many small tensors a sample": Setup(samples=480, parts=300, batch_size=8, prefetch=4),
    "a compute-bound step (no alert)": Setup(wait=0.001, step_s=0.03),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated names, as below")
    args = parser.parse_args()
    names = args.cases.split(",")
    print(f"# {datetime.date.today()}, {CPUS} CPUs, median of {args.repeats} interleaved repeats; data wait: "
          "profkit/data_wait_s summed over the fit's epochs")
    print("| loader | first advice line | data wait as it is, s | advice followed, s | alternative, s | right |")
    print("|---|---|---:|---:|---:|---|")
    for name in names:
        setup = CASES[name]
        before, after, other, advice = [], [], [], []
        for _ in range(args.repeats):
            waited, said = run(setup)
            before.append(waited)
            advice = advice or said
        line = advice[0] if advice else ""
        advised = follow(setup, line) if line else None
        second = alternative(setup, advised)
        for _ in range(args.repeats):
            if advised is not None:
                after.append(run(advised)[0])
            other.append(run(second)[0])
        b, o = statistics.median(before), statistics.median(other)
        a = statistics.median(after) if after else None
        if not advice:
            right = "yes: no alert" if "no alert" in name else "no: no alert"
        elif a is None:
            right = "no: the advice changes nothing here"
        else:
            right = "yes" if a <= o or a <= b / 2 else "no"
        shown = (line or "(no alert)").replace("|", "/")
        print(f"| {name} | {shown} | {b:.2f} | {'-' if a is None else f'{a:.2f}'} | {o:.2f} | {right} |", flush=True)


if __name__ == "__main__":
    main()
