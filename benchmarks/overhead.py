"""Overhead of PerformanceMonitor, interleaved in one run; prints ratios against no callback.

1. Fit time, one epoch of 3000 steps of a small CPU model (~1.6 ms a step, 1 thread): no callback |
   a no-op callback (a control: on a shared machine its ratio shows how noisy the run is) |
   metrics only, ``PerformanceMonitor(profile=False, capture_on_alert=False)`` (goal: within 0.5%) |
   metrics + default windows, ``PerformanceMonitor()`` (goal: within 2%) | Lightning's
   ``PyTorchProfiler()`` defaults. Interference
   from other tenants only ever adds time, so the ratio of the fastest runs is the steadier wall-clock
   figure; the training thread's CPU time does not count the time it waits for a core at all (but neither
   does it count what the writer's thread and the finalizing process take from it on 2 cores): the CPU of
   the whole process tree (every thread, and the finalizing process, reaped at the fit's end) counts them.
   Then the CPU per window outside the training thread, in a fit of 20 windows.
2. Per step, inside one long fit: the callback is put in and out every 100 steps (with it, its fetch
   timing); each block with it is compared with the mean of its neighbours without it, and the median of
   600 such differences (with its bootstrap standard error) is what a real step pays, rolling checks and
   polls included (a check runs in the first step of the next block with the callback in, so no more often
   than in a fit). A callback without per-batch hooks is the control: Lightning only looks its hooks up,
   3,876 instructions a step by callgrind (``instructions.py --direct``), within this figure's error.
   Wall-clock ratios of whole fits on a shared 2-core machine swing by several percent; this figure does
   not. (A tight loop over the same calls, as this benchmark used before, reads 5-10x lower: our code runs
   with warm caches there, not in a real step.)
3. Inside the per-step code: the time spent in Lightning's own fetch callbacks, in ours, and in our
   batch-end work, each timed around the call inside real fits. Only those calls are timed, so this reads
   to a few tenths of a µs where the figure above has an error of about 2 µs; it leaves out what our code
   does to the caches of the code around it, which the figure above includes.
4. Training-thread time of one window (its warm-up and 3 profiled steps, and the save): our background
   writer against torch's synchronous ``tensorboard_trace_handler(use_gzip=True)``, measured as the extra
   wall time of the window's steps and the 300 that follow, against the same steps without a window.

    python benchmarks/overhead.py [--repeats 9] [--steps 3000] [--pairs 600] [--parts fits,window-cpu,per-step,inside,window]
        [--configs none,noop,metrics,profkit,lightning]
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import resource
import statistics
import sys
import tempfile
import time
import warnings
from typing import Callable, Optional

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.profilers import PyTorchProfiler
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from lightning_profkit import PerformanceMonitor  # noqa: E402
from lightning_profkit.monitor.profiling.windows import quiet_kineto  # noqa: E402
from lightning_profkit.monitor.writing.writer import TraceWriter, WindowJob  # noqa: E402


class MLP(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-3)


class Cycled(TensorDataset):
    """A TensorDataset read round and round to ``length`` samples: a long fit without its memory."""

    def __init__(self, *tensors: torch.Tensor, length: int) -> None:
        super().__init__(*tensors)
        self.length, self.size = length, len(tensors[0])

    def __getitem__(self, index: int):
        return super().__getitem__(index % self.size)

    def __len__(self) -> int:
        return self.length


class NoOp(Callback):
    """A callback that does nothing: Lightning's own cost of dispatching hooks to one more callback."""


class Quiet(Callback):
    """A callback without per-batch hooks (as PerformanceMonitor between its steps with work): Lightning
    still looks each hook up on it."""

    on_train_batch_start = on_train_batch_end = on_before_backward = on_after_backward = None  # type: ignore[assignment]
    on_before_optimizer_step = on_before_zero_grad = None  # type: ignore[assignment]


class Toggle(Callback):
    """Inside one long fit, puts ``extra`` (a callback; a PerformanceMonitor with its fetch timing) in and
    out every ``block`` steps and times each block from its first step's start to the next block's. The
    blocks with and without it alternate, so a slow spell of the machine falls on both alike."""

    def __init__(self, extra: Callback, block: int) -> None:
        self.extra, self.block, self.on, self.t0 = extra, block, True, None
        self.times: dict = {True: [], False: []}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx % self.block:
            return
        now = time.perf_counter()
        if self.t0 is not None and batch_idx > 2 * self.block:  # leave the start-up out
            self.times[self.on].append(now - self.t0)
        self.on = (batch_idx // self.block) % 2 == 0
        trainer.callbacks = ([self.extra] if self.on else []) + [self]
        if isinstance(self.extra, PerformanceMonitor):  # the fetcher took the loop's pair at epoch start
            loop, fetcher = trainer.fit_loop.epoch_loop, trainer.fit_loop._data_fetcher
            pair = (loop._on_before_fetch, loop._on_after_fetch)  # ours while installed
            if not self.on:
                pair = tuple(getattr(type(loop), name).__get__(loop) for name in ("_on_before_fetch", "_on_after_fetch"))
            fetcher._start_profiler, fetcher._stop_profiler = pair
        self.t0 = time.perf_counter()


def in_fit_us(extra: Callback, root: str, block: int = 100, pairs: int = 600) -> tuple[float, float, float]:
    """µs per step that ``extra`` adds inside a real fit, its standard error, and the median step without it.

    Each block with ``extra`` is compared with the mean of the blocks without it just before and just after,
    which cancels a machine that speeds up or slows down steadily (comparing with the block after only read
    a callback that does nothing at all as 5-7 µs); the figure is the median of these differences, its error
    the spread of that median over bootstrap resamples."""
    steps = block * (2 * pairs + 3)  # odd number of blocks: the last has ``extra`` in, for the fit's end
    data = Cycled(torch.randn(100_000 * 32, 128), torch.randn(100_000 * 32, 1), length=steps * 32)
    toggle = Toggle(extra, block)
    trainer = Trainer(
        max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=root, callbacks=[extra, toggle],
    )
    with quiet_kineto(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(MLP(), DataLoader(data, batch_size=32))
    on, off = toggle.times[True], toggle.times[False]  # on[k] is followed by off[k]
    added = [(on[k] - (off[k - 1] + off[k]) / 2) / block * 1e6 for k in range(1, min(len(on), len(off)))]
    rng = random.Random(0)
    spread = [statistics.median(rng.choices(added, k=len(added))) for _ in range(300)]
    return statistics.median(added), statistics.stdev(spread), statistics.median(off) / block * 1e6


def _timed(owner: type, name: str, spent: dict) -> None:
    """Replace ``owner.name`` by a wrapper that adds the nanoseconds of each call to ``spent[name]``."""
    fn = getattr(owner, name)

    def timed(*args, **kwargs):
        t0 = time.perf_counter_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0) + time.perf_counter_ns() - t0

    setattr(owner, name, timed)


def inside_us(steps: int, root: str) -> dict[str, float]:
    """µs per step spent inside the code that runs at each step, timed around it inside real fits (a
    figure with little noise, since only those calls are timed): Lightning's own fetch pair in a fit without
    us; ours (which makes Lightning's profiler calls, unless it is the default no-op one) and our batch-end work
    in a fit with metrics only."""
    from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop

    from lightning_profkit.monitor.timing import fetch_timer

    spent: dict = {}
    lightning_pair = (_TrainingEpochLoop, ("_on_before_fetch", "_on_after_fetch"))
    ours_per_step = ((fetch_timer.FetchTimer, ("_train_before", "_train_after")),
                     (PerformanceMonitor, ("on_train_batch_end",)))
    # one set at a time: with Lightning's pair wrapped, the fetch timer would take it for a loop's override
    for config, wrapped in (("none", (lightning_pair,)), ("metrics", ours_per_step)):
        saved = [(cls, n, vars(cls)[n]) for cls, names in wrapped for n in names]
        try:
            for cls, name, _ in saved:
                _timed(cls, name, spent)
            fit_seconds(config, steps, root)
        finally:
            for cls, name, fn in saved:
                setattr(cls, name, fn)
    lightning = (spent["_on_before_fetch"] + spent["_on_after_fetch"]) / steps / 1e3
    ours = (spent.get("_train_before", 0) + spent.get("_train_after", 0)) / steps / 1e3
    return {"lightning": lightning, "ours": ours, "step_end": spent.get("on_train_batch_end", 0) / steps / 1e3}


# No windows at all: this model waits about 20% on its in-memory data, the alert threshold, so an alert
# would otherwise record a window (a capture) in some runs and not in others.
METRICS_ONLY_ARGS = {"profile": False, "capture_on_alert": False}
METRICS_ONLY = f"PerformanceMonitor({', '.join(f'{k}={v}' for k, v in METRICS_ONLY_ARGS.items())})"


def metrics_only() -> PerformanceMonitor:
    return PerformanceMonitor(**METRICS_ONLY_ARGS)


def make_fit(config: str, steps: int, root: str) -> Callable[[], None]:
    """One fit of ``steps`` steps in ``config``, built (data, model, trainer) and ready to run."""
    data = TensorDataset(torch.randn(steps * 32, 128), torch.randn(steps * 32, 1))
    kwargs: dict = {}
    if config == "noop":
        kwargs["callbacks"] = [NoOp()]
    elif config == "quiet":
        kwargs["callbacks"] = [Quiet()]
    elif config == "metrics":
        kwargs["callbacks"] = [metrics_only()]
    elif config == "profkit":
        kwargs["callbacks"] = [PerformanceMonitor()]
    elif config == "windows":  # the default windows alone: no window after an alert
        kwargs["callbacks"] = [PerformanceMonitor(capture_on_alert=False)]
    elif config == "lightning":
        kwargs["profiler"] = PyTorchProfiler(dirpath=root, filename="lp")
    trainer = Trainer(
        max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=root, **kwargs,
    )
    model, loader = MLP(), DataLoader(data, batch_size=32)

    def fit() -> None:
        with quiet_kineto():
            trainer.fit(model, loader)

    return fit


def tree_cpu() -> float:
    """CPU seconds of this process (every thread) and of its children that have been reaped."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def children_cpu() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return children.ru_utime + children.ru_stime


def fit_seconds(config: str, steps: int, root: str) -> tuple[float, float, float]:
    """Wall seconds of one fit, CPU seconds of the training thread (blind to other tenants' load), and CPU
    seconds of the whole process tree: every thread, and the finalizing process (reaped when the fit ends)."""
    fit = make_fit(config, steps, root)
    start, cpu, tree = time.perf_counter(), time.thread_time(), tree_cpu()
    fit()
    return time.perf_counter() - start, time.thread_time() - cpu, tree_cpu() - tree


def helper_cpu_per_window(windows: int, root: str) -> tuple[float, float]:
    """CPU milliseconds per window outside the training thread: of the finalizing process (children's
    rusage over a fit) and of the rest of the process beside the training thread (the writer thread), in a
    fit of ``windows`` default-size windows of this model."""
    steps = (windows + 1) * 20  # windows from step 20 on, every 20 steps
    data = TensorDataset(torch.randn(steps * 32, 128), torch.randn(steps * 32, 1))
    monitor = PerformanceMonitor(every_n_steps=20, warmup=1, active=3, alert_threshold=None)
    trainer = Trainer(
        max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=root, callbacks=[monitor],
    )
    child, own, thread = children_cpu(), resource.getrusage(resource.RUSAGE_SELF), time.thread_time()
    with quiet_kineto():
        trainer.fit(MLP(), DataLoader(data, batch_size=32))
    after = resource.getrusage(resource.RUSAGE_SELF)
    process = after.ru_utime + after.ru_stime - own.ru_utime - own.ru_stime
    others = process - (time.thread_time() - thread)
    n = len(monitor.traces)
    return 1000 * (children_cpu() - child) / n, 1000 * others / n


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
    writer = TraceWriter(on_error=lambda message, key: print(message))
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
        with quiet_kineto():
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
    parser.add_argument("--pairs", type=int, default=600, help="blocks with each callback in the per-step figure")
    parser.add_argument("--parts", default="fits,window-cpu,per-step,inside,window", help="which of the tables to make")
    parser.add_argument("--configs", default="none,noop,metrics,profkit,lightning", help="the fits to time (none first)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    torch.set_num_threads(1)
    root = tempfile.mkdtemp(prefix="profkit-bench-")

    configs = {
        "none": ("no callback", ""),
        "noop": ("a no-op callback (control: this run's noise and Lightning's hook dispatch)", ""),
        "metrics": (f"metrics only: `{METRICS_ONLY}`", "<= 1.005"),
        "profkit": ("metrics + default windows: `PerformanceMonitor()`", "<= 1.02"),
        "lightning": ("Lightning `PyTorchProfiler()` defaults", ""),
    }
    configs = {c: configs[c] for c in args.configs.split(",")}
    names = list(configs) if "fits" in parts else []
    times: dict = {c: [] for c in names}
    cpu: dict = {c: [] for c in names}
    tree: dict = {c: [] for c in names}
    for c in names:
        fit_seconds(c, 200, root)  # warm imports, allocator and each code path
    for r in range(args.repeats if names else 0):
        k = r % len(names)
        for c in names[k:] + names[:k]:  # rotate the order each repeat
            wall, thread, everything = fit_seconds(c, args.steps, root)
            times[c].append(wall)
            cpu[c].append(thread)
            tree[c].append(everything)
    print(f"# {datetime.date.today()}, torch {torch.__version__}, {args.parts}")
    if "fits" in parts:
        fits_table(configs, times, cpu, tree, args.steps, args.repeats)
    if "window-cpu" in parts:
        window_cpu_table(root)
    if "per-step" in parts:
        per_step_table(root, args.pairs)
    if "inside" in parts:
        inside_table(root, args.steps)
    if "window" in parts:
        window_table(root, args.repeats, statistics.median(times["none"]) if times.get("none") else None)


def fits_table(configs: dict, times: dict, cpu: dict, tree: dict, steps: int, repeats: int) -> None:
    base, cpu_base, tree_base = (statistics.median(x["none"]) for x in (times, cpu, tree))
    print(f"fit of {steps} steps, median of {repeats}")
    fastest = min(times["none"])
    print("| configuration | median fit s | ms/step | ratio of medians | ratio of fastest runs "
          "| training-thread CPU, ratio of medians | all processes' CPU, ratio of medians | goal |")
    print("|---|---|---|---|---|---|---|---|")
    for c, (label, goal) in configs.items():
        t = statistics.median(times[c])
        print(f"| {label} | {t:.2f} | {1000 * t / steps:.3f} | {t / base:.3f} | {min(times[c]) / fastest:.3f} "
              f"| {statistics.median(cpu[c]) / cpu_base:.3f} | {statistics.median(tree[c]) / tree_base:.3f} | {goal} |")


def window_cpu_table(root: str) -> None:
    per_window = [helper_cpu_per_window(20, root) for _ in range(3)]
    print()
    print("| CPU per default window (3 steps and a warm-up) outside the training thread, fit of 20 windows, "
          "median of 3 | ms |")
    print("|---|---|")
    print(f"| the finalizing process (children's rusage; none where every window is a MB of JSON or less) | "
          f"{statistics.median(w[0] for w in per_window):.1f} |")
    print(f"| the writer thread (the save; the finalizing of a window of a MB or less) and the rest of the training "
          f"process beside the training thread | "
          f"{statistics.median(w[1] for w in per_window):.1f} |")


def per_step_table(root: str, pairs: int) -> None:
    print()
    print(f"| per step, inside a fit | µs added (median of {pairs} blocks of 100 steps, each against its "
          "neighbours) | standard error | share of the step | share of a 1.6 ms step |")
    print("|---|---|---|---|---|")
    rows = (("a callback without per-batch hooks (Lightning looks each hook up; control: about 0)", Quiet()),
            ("a no-op callback (Lightning's dispatch of its hooks)", NoOp()),
            (f"metrics only: `{METRICS_ONLY}`", metrics_only()))
    for label, extra in rows:
        us, err, step = in_fit_us(extra, root, pairs=pairs)
        print(f"| {label} | {us:.1f} | {err:.1f} | {us / step:.2%} of {step:.0f} µs | {us / 1600:.2%} |")


def inside_table(root: str, steps: int) -> None:
    runs = [inside_us(steps, root) for _ in range(5)]
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    added = med["ours"] - med["lightning"] + med["step_end"]
    print()
    print("| inside the per-step code, timed around it in real fits of "
          f"{steps} steps (median of 5) | µs per step |")
    print("|---|---|")
    print(f"| Lightning's own fetch callbacks (a fit without us) | {med['lightning']:.2f} |")
    print(f"| ours in their place, metrics only (the timing, and Lightning's profiler calls unless it is the default "
          f"no-op one) | {med['ours']:.2f} |")
    print(f"| our batch-end work (a rolling check every 100 steps, a poll a second), spread over all steps "
          f"| {med['step_end']:.2f} |")
    print(f"| added by us: ours - Lightning's + batch-end work | {added:.2f} |")


def window_table(root: str, repeats: int, epoch_s: Optional[float]) -> None:
    handlers = ["none", "profkit", "torch"]
    cost: dict = {h: [] for h in handlers}
    for r in range(repeats * 3):
        for h in handlers[r % 3:] + handlers[: r % 3]:
            cost[h].append(window_cost(h, root))
    base = statistics.median(cost["none"])
    print()
    print("| a window written by | training-thread ms per window (profiled steps and save) | share of this run's epoch |")
    print("|---|---|---|")
    for h, label in (("profkit", "PerformanceMonitor writer (background)"), ("torch", "tensorboard_trace_handler(use_gzip=True)")):
        ms = 1000 * (statistics.median(cost[h]) - base)
        print(f"| {label} | {ms:.1f} | {f'{ms / 1000 / epoch_s:.2%}' if epoch_s else 'n/a'} |")


if __name__ == "__main__":
    main()
