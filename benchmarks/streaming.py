"""Do traces stream while the loader keeps every core busy, and what does that cost the fit?

A fit whose DataLoader workers burn CPU (as many workers as cores, each sample ``--burn`` seconds of CPU, as a
decoding and augmenting pipeline does), with the default windows (batches 11-13 of every epoch), optionally beside
``--busy`` more processes that burn CPU all along (another job on the node). For each window it prints the delay
from the window's last step to its trace appearing under its final name, and for the whole fit its wall time and the
CPU of its process tree (not the burners), against the same fit with metrics only (``profile=False``). Who finalizes
the windows is compared as ``--finalizer`` lists it: ``thread`` is the writer thread (these windows' traces are a few
hundred kB, under ``IN_THREAD_BYTES``); a number or ``idle`` sends every window to the finalizing process at that
nice increment or ``SCHED_IDLE`` (see ``lightning_profkit.monitor.writing.child.lower_priority``), as a trace over a
MB goes. Configurations are interleaved.

    python benchmarks/streaming.py [--epochs 6] [--samples 500] [--burn 0.008] [--busy 0,1] [--finalizer thread,10,idle]
        [--repeats 1]
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WINDOW_END = 13  # the default windows' last batch: skip_first 10, warmup 1, active 3


def fit(profile: bool, epochs: int, samples: int, burn: float, finalizer: str) -> dict:
    """One fit in this process; each window's delay to its trace, and the fit's wall time."""
    import warnings

    import torch
    from lightning.pytorch import Callback, LightningModule, Trainer
    from torch.utils.data import DataLoader, Dataset

    from lightning_profkit import PerformanceMonitor
    from lightning_profkit.machine import usable_cpus
    from lightning_profkit.monitor.writing import writer

    if finalizer != "thread":
        writer.IN_THREAD_BYTES = -1  # every window to the finalizing process

    class Burning(Dataset):
        def __len__(self) -> int:
            return samples

        def __getitem__(self, i: int) -> torch.Tensor:
            start = time.process_time()
            while time.process_time() - start < burn:
                pass
            return torch.full((32,), float(i))

    class Model(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(32, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

        def train_dataloader(self):
            return DataLoader(Burning(), batch_size=1, num_workers=usable_cpus(), persistent_workers=True)

    ended: dict[int, float] = {}
    seen: dict[int, float] = {}

    class WindowEnds(Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if batch_idx == WINDOW_END:
                ended[trainer.current_epoch] = time.perf_counter()

    root = tempfile.mkdtemp(prefix="profkit-streaming-")
    stop = threading.Event()

    def watch() -> None:  # every 50 ms: when each epoch's trace appears
        while not stop.wait(0.05):
            for path in glob.glob(os.path.join(root, "**", "*.pt.trace.json.gz"), recursive=True):
                epoch = int(re.search(r"epoch=(\d+)", path).group(1))
                seen.setdefault(epoch, time.perf_counter())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    monitor = PerformanceMonitor(profile=profile, alert_threshold=None, dirpath=os.path.join(root, "profiler"))
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Trainer(default_root_dir=root, max_epochs=epochs, logger=False, callbacks=[monitor, WindowEnds()],
                enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                accelerator="cpu", devices=1, num_sanity_val_steps=0).fit(Model())
    wall = time.perf_counter() - start
    time.sleep(0.1)
    stop.set()
    watcher.join()
    delays = [seen[e] - ended[e] if e in seen else None for e in sorted(ended)] if profile else []
    return {"wall_s": wall, "delays_s": delays}


def one(profile: bool, finalizer: str, busy: int, args: argparse.Namespace) -> dict:
    """:func:`fit` in a child process beside ``busy`` burning processes; with the CPU of the child's whole tree (its
    loader workers and finalizing process, reaped by it; not the burners)."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        child = subprocess.Popen(
            [sys.executable, __file__, "--one", "1" if profile else "0", "--epochs", str(args.epochs), "--samples",
             str(args.samples), "--burn", str(args.burn), "--finalizer", finalizer],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env=dict(os.environ, PROFKIT_FINALIZER_NICE="10" if finalizer == "thread" else finalizer, PYTHONPATH=ROOT))
        out = child.stdout.read()
        _, status, usage = os.wait4(child.pid, 0)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"a fit failed: {out[-2000:]}")
    return {**json.loads(out.splitlines()[-1]), "cpu_s": usage.ru_utime + usage.ru_stime}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--samples", type=int, default=500, help="samples an epoch (batches of one)")
    parser.add_argument("--burn", type=float, default=0.008, help="CPU seconds a sample")
    parser.add_argument("--busy", default="0,1", help="burning processes beside the fit, comma-separated cases")
    parser.add_argument("--finalizer", default="thread,10,idle",
                        help="who finalizes the windows: thread, or the finalizing process at a nice increment or idle")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(fit(args.one == "1", args.epochs, args.samples, args.burn, args.finalizer)))
        return
    print(f"# {datetime.date.today()}, {os.cpu_count()} CPUs, {args.epochs} epochs of {args.samples} samples of "
          f"{args.burn * 1000:.0f} ms of CPU, workers = CPUs, {args.repeats} interleaved repeat(s)")
    print("| busy processes | finalized by | delay per window, s | worst s | fit wall / metrics only | "
          "CPU, all processes / metrics only |")
    print("|---|---|---|---|---|---|")
    for busy in map(int, args.busy.split(",")):
        runs: dict[str, list[dict]] = {way: [] for way in ["metrics only", *args.finalizer.split(",")]}
        for _ in range(args.repeats):
            for way in runs:
                runs[way].append(one(way != "metrics only", "thread" if way == "metrics only" else way, busy, args))
        base_wall = statistics.median(r["wall_s"] for r in runs["metrics only"])
        base_cpu = statistics.median(r["cpu_s"] for r in runs["metrics only"])
        for way, done in runs.items():
            if way == "metrics only":
                continue
            delays = [d for r in done for d in r["delays_s"]]
            shown = ", ".join("not written" if d is None else f"{d:.1f}" for d in delays)
            worst = max((d for d in delays if d is not None), default=float("nan"))
            wall = statistics.median(r["wall_s"] for r in done) / base_wall
            cpu = statistics.median(r["cpu_s"] for r in done) / base_cpu
            label = "the writer thread" if way == "thread" else f"the finalizing process at {way}"
            print(f"| {busy} | {label} | {shown} | {worst:.1f} | {wall:.3f} | {cpu:.3f} |")


if __name__ == "__main__":
    main()
