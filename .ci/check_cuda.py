"""Check PerformanceMonitor's GPU path on a CUDA machine; prints one PASS/FAIL line per check.

    bash dev.sh check-cuda            # fresh machine: makes .venv (CUDA torch from PyPI), then runs this
    python .ci/check_cuda.py          # any environment where lightning_profkit and nvidia-ml-py import

Checks, on one GPU with a real Trainer:
1. NVML samples: ``profkit/gpu_idle_ratio`` is logged every epoch, within [0, 1], and higher for a
   data-bound run (a DataLoader that sleeps) than for a compute-bound one.
2. The trace: each window holds GPU kernels; ``profkit/window/gpu_idle_ratio`` is logged within [0, 1];
   peak memory is logged.
3. No device synchronisation on unprofiled steps: the whole fit runs under
   ``torch.cuda.set_sync_debug_mode("warn")``; every synchronising call is attributed by its Python stack,
   and none may come from lightning_profkit outside a window's start/stop or the epoch-end reduction.
   A deliberate ``.item()`` first proves that the detection works.

Exit status: 0 all passed, 1 a check failed, 3 no CUDA device (``--allow-cpu`` runs the CPU path instead:
GPU figures must then be absent, which is what the test suite does with this script).
"""

from __future__ import annotations

import argparse
import csv
import glob
import gzip
import json
import os
import sys
import tempfile
import threading
import time
import traceback
import warnings

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, Dataset

from lightning_profkit import PerformanceMonitor

# where lightning_profkit may synchronise: a window starting or ending (session.py), the epoch-end reduction
ALLOWED_FILES = ("session.py",)
ALLOWED_FUNCTIONS = ("_log_epoch",)
failures: list[str] = []


def check(ok: bool, what: str, detail: str = "") -> None:
    print(f"{'PASS' if ok else 'FAIL'} {what}" + (f": {detail}" if detail else ""), flush=True)
    if not ok:
        failures.append(what)


class Batches(Dataset):
    def __init__(self, n: int, delay: float) -> None:
        self.n, self.delay = n, delay

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.delay:
            time.sleep(self.delay)
        return torch.randn(256, 1024)


class Model(LightningModule):
    def __init__(self, depth: int) -> None:
        super().__init__()
        width = 4096 if depth > 1 else 1024
        layers = [torch.nn.Linear(1024, width)] + [torch.nn.Linear(width, width) for _ in range(depth - 1)]
        self.net = torch.nn.Sequential(*layers)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return self.net(batch).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=1e-4)


class SyncLog:
    """Sorts the synchronising calls that ``set_sync_debug_mode("warn")`` reports by their Python stack."""

    def __init__(self) -> None:
        self.ours: list[str] = []  # on the training thread, outside the allowed places
        self.background = 0  # in our writer or sampler threads
        self.others = 0  # Lightning's or the model's

    def __call__(self, message, category, filename, lineno, file=None, line=None) -> None:
        if "synchroniz" not in str(message):
            return
        stack = traceback.extract_stack()[:-1]
        mine = [f for f in stack if f"{os.sep}lightning_profkit{os.sep}" in f.filename]
        if not mine:
            self.others += 1
        elif threading.current_thread() is not threading.main_thread():
            self.background += 1
        elif not any(f.filename.endswith(ALLOWED_FILES) or f.name in ALLOWED_FUNCTIONS for f in mine):
            self.ours.append("".join(traceback.format_list(stack[-8:])))


def fit(root: str, cuda: bool, delay: float, depth: int, steps: int, sync_log: SyncLog | None) -> dict:
    logger = CSVLogger(root, name="run")
    trainer = Trainer(
        accelerator="cuda" if cuda else "cpu", devices=1, max_epochs=2, logger=logger,
        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
        callbacks=[PerformanceMonitor(skip_first=5, warmup=1, active=3)], log_every_n_steps=10_000,
    )
    loader = DataLoader(Batches(steps, delay), batch_size=None, num_workers=0)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        if sync_log is not None:
            warnings.showwarning = sync_log
            torch.cuda.set_sync_debug_mode("warn")
        try:
            trainer.fit(Model(depth), loader)
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode(0)
    rows = list(csv.DictReader(open(os.path.join(logger.log_dir, "metrics.csv"))))
    epochs = [r for r in rows if r.get("profkit/data_wait_ratio")]
    windows = [r for r in rows if r.get("profkit/window/step_time_ms")]
    traces = glob.glob(os.path.join(logger.log_dir, "profiler", "*", "*.pt.trace.json.gz"))
    return dict(epochs=epochs, windows=windows, traces=traces, columns=set(rows[0]) if rows else set())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150, help="batches per epoch (NVML needs a few seconds)")
    parser.add_argument("--allow-cpu", action="store_true", help="without CUDA, run the CPU path instead of failing")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    if not cuda and not args.allow_cpu:
        print("NOT CHECKED: no CUDA device (torch.cuda.is_available() is False)")
        return 3
    root = tempfile.mkdtemp(prefix="profkit-check-")
    print(f"# torch {torch.__version__}, {'CUDA ' + torch.cuda.get_device_name() if cuda else 'CPU only'}; files in {root}")

    if cuda:
        probe = SyncLog()
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = probe
            torch.cuda.set_sync_debug_mode("warn")
            torch.ones(1, device="cuda").sum().item()
            torch.cuda.set_sync_debug_mode(0)
        check(probe.others == 1, "sync detection sees a deliberate .item()", f"{probe.others} seen")

    sync_log = SyncLog() if cuda else None
    data_bound = fit(os.path.join(root, "data"), cuda, delay=0.02, depth=1, steps=args.steps, sync_log=sync_log)
    compute_bound = fit(os.path.join(root, "compute"), cuda, delay=0.0, depth=1 if not cuda else 48,
                        steps=args.steps, sync_log=None)

    check(len(data_bound["traces"]) == 2, "one trace per epoch window", f"{len(data_bound['traces'])} found")
    check(len(data_bound["epochs"]) == 2, "epoch metrics logged twice", f"{len(data_bound['epochs'])} rows")
    if not cuda:
        gpu = sorted(c for c in data_bound["columns"] if "gpu" in c or "memory" in c)
        check(not gpu, "CPU run: no GPU metric is logged (absent, not zero)", ", ".join(gpu))
    else:
        idle = [float(r.get("profkit/gpu_idle_ratio") or "nan") for r in data_bound["epochs"]]
        busy = [float(r.get("profkit/gpu_idle_ratio") or "nan") for r in compute_bound["epochs"]]
        check(all(0 <= v <= 1 for v in idle + busy), "NVML gpu_idle_ratio logged every epoch within [0, 1]",
              f"data-bound {idle}, compute-bound {busy}")
        check(min(idle) > max(busy), "NVML: the data-bound run idles more than the compute-bound one")
        w_idle = [float(r.get("profkit/window/gpu_idle_ratio") or "nan") for r in data_bound["windows"]]
        check(bool(w_idle) and all(0 <= v <= 1 for v in w_idle), "trace gpu_idle_ratio within [0, 1]", f"{w_idle}")
        peak = [float(r.get("profkit/peak_memory_mb") or "nan") for r in data_bound["epochs"]]
        check(all(v > 0 for v in peak), "peak_memory_mb logged", f"{peak}")
        kernels = 0
        for path in data_bound["traces"]:
            events = json.load(gzip.open(path)).get("traceEvents", [])
            kernels += sum(1 for e in events if e.get("cat") == "kernel")
        check(kernels > 0, "the traces hold GPU kernels", f"{kernels} kernel events")
        check(not sync_log.ours, "no device synchronisation from lightning_profkit on unprofiled steps",
              f"{len(sync_log.ours)} found" + ("\n" + sync_log.ours[0] if sync_log.ours else ""))
        print(f"# synchronising calls during the data-bound fit (informational): {sync_log.others} from Lightning "
              f"or the model, {sync_log.background} in lightning_profkit's background threads")
    print("ALL PASSED" if not failures else f"{len(failures)} FAILED: {'; '.join(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
