"""Resident memory kept per profiler session: raw torch.profiler sessions against PerformanceMonitor windows.

    python benchmarks/memory.py [--sessions 200]

Each measurement runs in a fresh process; the figure is (RSS after the last session - RSS after the
first 20) / the sessions between, in KiB. Raw torch sessions record one (or 20) training steps of a tiny
model without Lightning; PerformanceMonitor records one step every other step of a Lightning fit. What
torch keeps grows with the events a session recorded, and a Lightning step records many.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def rss_kib() -> float:
    with open("/proc/self/status") as f:
        return next(float(line.split()[1]) for line in f if line.startswith("VmRSS"))


def raw_torch(sessions: int, save: bool, steps: int = 1) -> float:
    import tempfile

    import torch

    from lightning_profkit.monitor.profiling.windows import quiet_kineto

    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(2, 8)
    out = tempfile.mkdtemp()
    start = 0.0
    for i in range(sessions):
        with quiet_kineto():
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            prof.start()
            for _ in range(steps):
                opt.zero_grad()
                model(x).pow(2).mean().backward()
                opt.step()
            prof.stop()
            if save:
                prof.profiler.kineto_results.save(os.path.join(out, "trace.json"))
        del prof
        if i == 19:
            start = rss_kib()
    return (rss_kib() - start) / (sessions - 20)


def monitor(sessions: int) -> float:
    import tempfile

    from lightning.pytorch import Callback

    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from conftest import SleepDataset, TinyModel, make_trainer

    from lightning_profkit import PerformanceMonitor

    class Gauge(Callback):
        start = 0.0

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.fit_loop.epoch_loop.total_batch_idx == 40:  # after 20 windows
                self.start = rss_kib()

    gauge = Gauge()
    mon = PerformanceMonitor(every_n_steps=2, warmup=0, active=1, alert_threshold=None, keep_last_windows=5)
    make_trainer(tempfile.mkdtemp(), [mon, gauge], max_steps=2 * sessions, max_epochs=-1).fit(TinyModel(SleepDataset(4 * sessions)))
    return (rss_kib() - gauge.start) / (sessions - 21)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--one", choices=["raw", "raw-save", "raw-20", "monitor"])
    args = parser.parse_args()
    if args.one:
        value = {"raw": lambda: raw_torch(args.sessions, False), "raw-save": lambda: raw_torch(args.sessions, True),
                 "raw-20": lambda: raw_torch(args.sessions, False, steps=20),
                 "monitor": lambda: monitor(args.sessions)}[args.one]()
        print(f"{value:.1f}")
        return
    rows = []
    for name, label in (("raw", "torch.profiler session, 1 step, results dropped"),
                        ("raw-save", "torch.profiler session, 1 step, results saved"),
                        ("raw-20", "torch.profiler session, 20 steps (20x the events), results dropped"),
                        ("monitor", "PerformanceMonitor window (1 step, Lightning fit, trace written)")):
        done = subprocess.run([sys.executable, __file__, "--one", name, "--sessions", str(args.sessions)],
                              capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
        rows.append((label, done.stdout.strip().splitlines()[-1] if done.returncode == 0 else "failed"))
    print(f"# {datetime.date.today()}, {args.sessions} sessions each, fresh process each")
    print("| what | RSS kept per session, KiB |")
    print("|---|---|")
    for label, value in rows:
        print(f"| {label} | {value} |")


if __name__ == "__main__":
    main()
