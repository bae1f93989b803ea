"""Overhead of PerformanceMonitor, interleaved in one run; prints ratios against no callback.

1. Fit time, one epoch of 3000 steps of a small CPU model (~1.6 ms a step, 1 thread): no callback |
   a no-op callback (a control: on a shared machine its ratio shows how noisy the run is) |
   metrics only, ``PerformanceMonitor(profile=False)`` (goal: within 0.5%) | metrics + default windows,
   ``PerformanceMonitor()`` (goal: within 2%) | Lightning's ``PyTorchProfiler()`` defaults. Interference
   from other tenants only ever adds time, so the ratio of the fastest runs is the steadier wall-clock
   figure; the training thread's CPU time does not count the time it waits for a core at all (but neither
   does it count what the writer's thread and child process take from it on 2 cores).
2. Per step: what one unprofiled step pays in Lightning's machinery for the callback, timed inside a
   running fit: a fetch through ``trainer.profiler`` (our proxy), the six per-batch callback hooks as
   Lightning dispatches them and its step counters, against no callback and against a no-op callback,
   with PerformanceMonitor's occasional step-end work (rolling checks, polls) spread over the steps.
   Wall-clock ratios on a shared 2-core machine swing by several percent; this figure does not.
3. Training-thread time of one window (its warm-up and 3 profiled steps, and the save): our background
   writer against torch's synchronous ``tensorboard_trace_handler(use_gzip=True)``, measured as the extra
   wall time of the window's steps and the 300 that follow, against the same steps without a window.

    python benchmarks/overhead.py [--repeats 9] [--steps 3000]
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

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.trainer import call
from lightning.pytorch.profilers import PyTorchProfiler
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from lightning_profkit import PerformanceMonitor  # noqa: E402
from lightning_profkit.session import without_usdt_lines  # noqa: E402
from lightning_profkit.writer import TraceWriter, WindowJob  # noqa: E402


class MLP(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-3)


class NoOp(Callback):
    """A callback that does nothing: Lightning's own cost of dispatching hooks to one more callback."""


PER_BATCH_HOOKS = ("on_train_batch_start", "on_before_backward", "on_after_backward", "on_before_optimizer_step",
                   "on_before_zero_grad", "on_train_batch_end")


class HotPath(Callback):
    """At batch ``at``, times what one training step pays in Lightning's machinery: a fetch through
    ``trainer.profiler``, the six per-batch callback hooks, dispatched by Lightning's own
    ``_call_callback_hooks``, and the step counters Lightning advances, with each set of callbacks in turn
    (the fastest of ``rounds`` rounds). The steps count on, so PerformanceMonitor's work on the steps it
    is woken for (a rolling check every ``alert_window`` steps, a capture-request poll every second) is in
    the figure, spread over the steps as in a fit."""

    def __init__(self, monitor: PerformanceMonitor, at: int = 100, n: int = 5000, rounds: int = 7) -> None:
        self.monitor, self.at, self.n, self.rounds, self.us = monitor, at, n, rounds, {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx != self.at:
            return
        callbacks, proxy = trainer.callbacks, trainer.profiler
        progress = trainer.fit_loop.epoch_loop.batch_progress
        saved = progress.state_dict()
        optimizer = trainer.optimizers[0]
        args = {"on_train_batch_start": (batch, batch_idx), "on_before_backward": (outputs["loss"],),
                "on_after_backward": (), "on_before_optimizer_step": (optimizer,),
                "on_before_zero_grad": (optimizer,), "on_train_batch_end": (outputs, batch, batch_idx)}
        sets = {"none": ([], proxy.inner), "noop": ([NoOp()], proxy.inner), "ours": ([self.monitor], proxy)}
        fetch = "[_TrainingEpochLoop].train_dataloader_next"
        best = {k: float("inf") for k in sets}
        for _ in range(self.rounds):
            for label, (cbs, prof) in sets.items():
                trainer.callbacks, trainer.profiler = cbs, prof
                start = time.perf_counter()
                for _ in range(self.n):
                    trainer.profiler.start(fetch)
                    trainer.profiler.stop(fetch)
                    progress.increment_ready()
                    for hook in PER_BATCH_HOOKS:
                        call._call_callback_hooks(trainer, hook, *args[hook])
                    progress.increment_completed()
                best[label] = min(best[label], (time.perf_counter() - start) / self.n * 1e6)
        trainer.callbacks, trainer.profiler = callbacks, proxy
        progress.load_state_dict(saved)
        self.us = best


def hot_path_us(profile: bool, root: str) -> dict[str, float]:
    """µs per step added, against no callback, by a no-op callback and by PerformanceMonitor."""
    # the probe's back-to-back calls look data-bound to the alert rule: no capture, so no session opens
    monitor = PerformanceMonitor(profile=profile, capture_on_alert=False)
    probe = HotPath(monitor)
    trainer = Trainer(
        max_steps=200, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=root, callbacks=[monitor, probe],
    )
    with without_usdt_lines(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(MLP(), DataLoader(TensorDataset(torch.randn(6400, 128), torch.randn(6400, 1)), batch_size=32))
    return {k: v - probe.us["none"] for k, v in probe.us.items() if k != "none"}


def fit_seconds(config: str, steps: int, root: str) -> tuple[float, float]:
    """Wall seconds of one fit, and CPU seconds of the training thread (blind to other tenants' load)."""
    data = TensorDataset(torch.randn(steps * 32, 128), torch.randn(steps * 32, 1))
    kwargs: dict = {}
    if config == "noop":
        kwargs["callbacks"] = [NoOp()]
    elif config == "metrics":
        kwargs["callbacks"] = [PerformanceMonitor(profile=False)]
    elif config == "profkit":
        kwargs["callbacks"] = [PerformanceMonitor()]
    elif config == "lightning":
        kwargs["profiler"] = PyTorchProfiler(dirpath=root, filename="lp")
    trainer = Trainer(
        max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=root, **kwargs,
    )
    model = MLP()
    start, cpu = time.perf_counter(), time.thread_time()
    with without_usdt_lines():
        trainer.fit(model, DataLoader(data, batch_size=32))
    return time.perf_counter() - start, time.thread_time() - cpu


def window_cost(handler: str, root: str, follow: int = 300) -> float:
    """Training-thread seconds of one 3-step window (1 warm-up step) and the ``follow`` steps after it."""
    model = MLP().net
    x, y = torch.randn(32, 128), torch.randn(32, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> None:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    for _ in range(20):
        step()
    writer = TraceWriter(on_error=print)
    out = os.path.join(root, handler, str(time.time_ns()))
    if handler == "torch":
        on_ready = torch.profiler.tensorboard_trace_handler(out, use_gzip=True)
    elif handler == "profkit":
        def on_ready(prof):
            writer.submit(WindowJob(prof.profiler.kineto_results, os.path.join(out, "w.1.pt.trace.json.gz")))
    sched = torch.profiler.schedule(wait=0, warmup=1, active=3, repeat=1)
    start = time.perf_counter()
    if handler == "none":
        for _ in range(4):
            step()
    else:
        with without_usdt_lines():
            prof = torch.profiler.profile(schedule=sched, on_trace_ready=on_ready)
            prof.start()
            for _ in range(4):
                step()
                prof.step()  # after the 4th: the window ends and the handler runs
            prof.stop()
    for _ in range(follow):
        step()
    elapsed = time.perf_counter() - start
    writer.close(60)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--steps", type=int, default=3000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    root = tempfile.mkdtemp(prefix="profkit-bench-")

    configs = {
        "none": ("no callback", ""),
        "noop": ("a no-op callback (control: this run's noise and Lightning's hook dispatch)", ""),
        "metrics": ("metrics only: `PerformanceMonitor(profile=False)`", "<= 1.005"),
        "profkit": ("metrics + default windows: `PerformanceMonitor()`", "<= 1.02"),
        "lightning": ("Lightning `PyTorchProfiler()` defaults", ""),
    }
    names = list(configs)
    times: dict = {c: [] for c in names}
    cpu: dict = {c: [] for c in names}
    for c in names:
        fit_seconds(c, 200, root)  # warm imports, allocator and each code path
    for r in range(args.repeats):
        k = r % len(names)
        for c in names[k:] + names[:k]:  # rotate the order each repeat
            wall, thread = fit_seconds(c, args.steps, root)
            times[c].append(wall)
            cpu[c].append(thread)
    base, cpu_base = statistics.median(times["none"]), statistics.median(cpu["none"])
    print(f"# {datetime.date.today()} fit of {args.steps} steps, median of {args.repeats}, torch {torch.__version__}")
    fastest = min(times["none"])
    print("| configuration | median fit s | ms/step | ratio of medians | ratio of fastest runs "
          "| training-thread CPU, ratio of medians | goal |")
    print("|---|---|---|---|---|---|---|")
    for c, (label, goal) in configs.items():
        t = statistics.median(times[c])
        print(f"| {label} | {t:.2f} | {1000 * t / args.steps:.3f} | {t / base:.3f} | {min(times[c]) / fastest:.3f} "
              f"| {statistics.median(cpu[c]) / cpu_base:.3f} | {goal} |")

    step_us = 1e6 * base / args.steps
    print()
    print("| per step, in Lightning's dispatch and our hooks | µs added | share of this run's step "
          f"({step_us:.0f} µs) | share of a 1.6 ms step |")
    print("|---|---|---|---|")
    added = {profile: hot_path_us(profile, root) for profile in (False, True)}
    rows = (("a no-op callback (Lightning's dispatch of six hooks)", added[False]["noop"]),
            ("metrics only", added[False]["ours"]), ("metrics + default windows (unprofiled step)", added[True]["ours"]))
    for label, us in rows:
        print(f"| {label} | {us:.2f} | {us / step_us:.3%} | {us / 1600:.3%} |")

    handlers = ["none", "profkit", "torch"]
    cost: dict = {h: [] for h in handlers}
    for r in range(args.repeats * 3):
        for h in handlers[r % 3:] + handlers[: r % 3]:
            cost[h].append(window_cost(h, root))
    base = statistics.median(cost["none"])
    print()
    print("| a window written by | training-thread ms per window (profiled steps and save) | share of this run's epoch |")
    print("|---|---|---|")
    epoch_s = statistics.median(times["none"])
    for h, label in (("profkit", "PerformanceMonitor writer (background)"), ("torch", "tensorboard_trace_handler(use_gzip=True)")):
        ms = 1000 * (statistics.median(cost[h]) - base)
        print(f"| {label} | {ms:.1f} | {ms / 1000 / epoch_s:.2%} |")


if __name__ == "__main__":
    main()
