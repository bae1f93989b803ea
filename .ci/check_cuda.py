"""Check PerformanceMonitor's GPU path on a CUDA machine; prints one PASS/FAIL line per check.

    python3 .ci/check_cuda.py         # from the checkout, with torch, Lightning and nvidia-ml-py installed
    bash dev.sh check-cuda            # the same, with the machine's python3 (no virtual environment, no network)

It imports lightning_profkit from this checkout; of the package's own dependencies a GPU machine with
torch and Lightning usually lacks only msgspec and isal: ``bash .ci/gpu_wheels.sh``
downloads their wheels into ``.whl/`` on a machine with network, to install there with ``--no-index``.

Checks, on one GPU with a real Trainer, for a data-bound run (a DataLoader that sleeps) and a compute-bound one:
1. NVML samples: ``profkit/gpu_idle_ratio`` is logged every epoch, within [0, 1], and higher for the
   data-bound run than for the compute-bound one. One raw NVML timestamp is printed beside ``time.time()``.
2. The traces: the scheduled window of every epoch is written, and every window (alert captures too)
   holds GPU kernels; ``profkit/window/gpu_idle_share`` is logged within [0, 1]; peak memory is logged.
3. No device synchronisation on unprofiled steps: both fits run under
   ``torch.cuda.set_sync_debug_mode("warn")``; every synchronising call is attributed by its Python stack,
   and none may come from lightning_profkit outside a window's start and stop (``monitor/profiling/windows.py``).
   A deliberate ``.item()`` first proves that the detection works. Other warnings are passed on.
4. What profiling costs, on the compute-bound model: the default windows' wall time against no callback
   (fits interleaved); the unprofiled steps after a window against those before the first one
   (``profkit/overhead/after_window_ratio``) with ``TEARDOWN_CUPTI`` unset, ``0`` and ``1``, each in a fresh
   process (kineto reads it there), and whether the warning about it was given; the training thread's
   milliseconds per window and the CPU off it (``overhead/window_ms``, ``overhead/helper_cpu_s``).
5. A window's trace opens in torch-tb-profiler's loader and, on CUDA, in HolisticTraceAnalysis, with GPU
   kernels, and HTA's idle share of the compute-bound fit's first window is within 0.1 of our
   ``gpu_idle_share`` (each where it is installed; "not checked" otherwise, which fails nothing).

The findings end as a markdown table, printed and written to ``--markdown`` (default: ``findings.md`` in the
run's folder), for docs/gpu-check.md.

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
import subprocess
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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout's package
from lightning_profkit import PerformanceMonitor  # noqa: E402

# where lightning_profkit may synchronise: a window's profiler session starting or ending
ALLOWED_FILES = ("monitor/profiling/windows.py",)  # paths in the package, with /
ALLOWED_FUNCTIONS: tuple[str, ...] = ()
# where lightning_profkit only calls Lightning's own code (timing it): a synchronisation below such a frame is
# Lightning's unless another frame of ours is below it (Lightning's setup_data reduces the loader's length
# on the device every epoch, measured on an H200 with Lightning 2.6)
PASS_THROUGH = (("monitor/timing/fetch_timer.py", "_timed"),)
SKIP_FIRST, WARMUP, ACTIVE = 5, 1, 3
failures: list[str] = []
findings: list[tuple[str, str]] = []  # (what, measured): the markdown table


def found(what: str, value: str) -> None:
    print(f"# {what}: {value}", flush=True)
    findings.append((what, value))


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
        self.ours: dict[str, int] = {}  # on the training thread, outside the allowed places: stack -> times
        self.background = 0  # in our writer or sampler threads
        self.others = 0  # Lightning's or the model's
        self.forward = warnings.showwarning  # every other warning is shown as usual

    def __call__(self, message, category, filename, lineno, file=None, line=None) -> None:
        if "synchroniz" not in str(message):
            self.forward(message, category, filename, lineno, file, line)
            return
        stack = traceback.extract_stack()[:-1]
        through = [i for i, f in enumerate(stack)
                   if any(f.filename.replace(os.sep, "/").endswith(path) and f.name == name for path, name in PASS_THROUGH)]
        below = stack[through[-1] + 1:] if through else stack
        mine = [f for f in below if f"{os.sep}lightning_profkit{os.sep}" in f.filename]
        if not mine:
            self.others += 1
        elif threading.current_thread() is not threading.main_thread():
            self.background += 1
        elif not any(f.filename.replace(os.sep, "/").endswith(ALLOWED_FILES) or f.name in ALLOWED_FUNCTIONS for f in mine):
            where = "".join(traceback.format_list(stack[-8:]))
            self.ours[where] = self.ours.get(where, 0) + 1


def fit(root: str, cuda: bool, delay: float, depth: int, steps: int, sync_log: SyncLog | None, epochs: int = 2,
        monitor: PerformanceMonitor | None = None) -> dict:
    logger = CSVLogger(root, name="run")
    if monitor is None:
        monitor = PerformanceMonitor(skip_first=SKIP_FIRST, warmup=WARMUP, active=ACTIVE)
    trainer = Trainer(
        accelerator="cuda" if cuda else "cpu", devices=1, max_epochs=epochs, logger=logger,
        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
        callbacks=[monitor], log_every_n_steps=10_000,
    )
    loader = DataLoader(Batches(steps, delay), batch_size=None, num_workers=0)
    with warnings.catch_warnings(record=sync_log is None) as caught:
        warnings.simplefilter("always")
        if sync_log is not None:
            warnings.showwarning = sync_log
            torch.cuda.set_sync_debug_mode("warn")
        try:
            trainer.fit(Model(depth), loader)
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode(0)
    metrics = os.path.join(logger.log_dir, "metrics.csv")
    rows = list(csv.DictReader(open(metrics))) if os.path.exists(metrics) else []
    epochs = [r for r in rows if r.get("profkit/data_wait_ratio")]
    windows = [r for r in rows if r.get("profkit/window/host_step_ms")]
    traces = {}  # (first step, last step) -> the trace's events
    for path in glob.glob(os.path.join(logger.log_dir, "profiler", "*", "*.pt.trace.json.gz")):
        trace = json.load(gzip.open(path))
        traces[tuple(trace["profkit"]["steps"])] = trace.get("traceEvents", [])
    columns = set().union(*(r.keys() for r in rows)) if rows else set()
    return dict(epochs=epochs, windows=windows, traces=traces, columns={c for c in columns if rows and any(r[c] for r in rows)},
                alerts=len(monitor.alerts), folders=sorted(glob.glob(os.path.join(logger.log_dir, "profiler", "*", ""))),
                warned=[str(w.message) for w in caught or []])


def figures(rows: list[dict], key: str) -> list[float]:
    return [float(r[key]) for r in rows if r.get(key)]


def teardown_run(root: str, cuda: bool, steps: int) -> None:
    """In a process of its own (``TEARDOWN_CUPTI`` as the caller set it): 3 epochs of the compute-bound model
    with the default windows; prints the after-window ratios, and whether we warned, as one JSON line."""
    run = fit(root, cuda, delay=0.0, depth=48 if cuda else 1, steps=steps, sync_log=None, epochs=3,
              monitor=PerformanceMonitor())
    ratios = figures(run["epochs"], "profkit/overhead/after_window_ratio")
    print("TEARDOWN " + json.dumps({"ratios": ratios, "warned": any("TEARDOWN_CUPTI" in w for w in run["warned"])}))


def cost(root: str, cuda: bool, steps: int) -> None:
    """Section 4: what profiling costs a GPU-bound fit."""
    walls: dict[str, list[float]] = {"none": [], "default windows": []}
    run: dict = {}
    for repeat in range(2):  # interleaved
        for label in walls:
            start = time.perf_counter()
            if label == "none":
                plain = Trainer(accelerator="cuda" if cuda else "cpu", devices=1, max_epochs=2, logger=False,
                                enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
                plain.fit(Model(48 if cuda else 1), DataLoader(Batches(steps, 0.0), batch_size=None))
            else:
                run = fit(os.path.join(root, f"cost{repeat}"), cuda, delay=0.0, depth=48 if cuda else 1, steps=steps,
                          sync_log=None, monitor=PerformanceMonitor())
            walls[label].append(time.perf_counter() - start)
    ratio = min(walls["default windows"]) / min(walls["none"])
    found("default windows, wall time of a 2-epoch fit / no callback (fastest of 2)",
          f"{ratio:.3f} ({min(walls['default windows']):.1f} s / {min(walls['none']):.1f} s)")
    window_ms, helper = figures(run["epochs"], "profkit/overhead/window_ms"), figures(run["epochs"], "profkit/overhead/helper_cpu_s")
    profiled = figures(run["epochs"], "profkit/overhead/profiled_step_ratio")
    check(bool(window_ms) and bool(profiled), "own-cost figures logged", f"window_ms {window_ms}, profiled {profiled}")
    found("profiled steps / unprofiled steps (profiled_step_ratio, per epoch)", ", ".join(f"{v:.2f}" for v in profiled))
    found("training-thread ms per window (window_ms, per epoch)", ", ".join(f"{v:.1f}" for v in window_ms))
    found("CPU s off the training thread (helper_cpu_s, per epoch)", ", ".join(f"{v:.3f}" for v in helper) or "-")
    for setting in (None, "0", "1"):
        env = {k: v for k, v in os.environ.items() if k != "TEARDOWN_CUPTI"}
        if setting is not None:
            env["TEARDOWN_CUPTI"] = setting
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--teardown-run", os.path.join(root, f"td{setting}"),
                               "--steps", str(steps)] + ([] if cuda else ["--allow-cpu"]),
                              capture_output=True, text=True, env=env, timeout=300)
        line = next((ln for ln in done.stdout.splitlines() if ln.startswith("TEARDOWN ")), None)
        name = f"TEARDOWN_CUPTI={setting}" if setting is not None else "TEARDOWN_CUPTI unset"
        check(line is not None, f"{name}: the fit ran", done.stderr[-2000:] if line is None else "")
        if line is not None:
            got = json.loads(line[len("TEARDOWN "):])
            found(f"{name}: unprofiled steps after the windows / before (after_window_ratio, epochs 0-2)",
                  ", ".join(f"{v:.3f}" for v in got["ratios"]) + ("; warned" if got["warned"] else "; no warning"))


def viewers(run: dict, cuda: bool) -> None:
    """Section 5: a window's trace in torch-tb-profiler's loader and HTA."""
    folder = run["folders"][0]
    try:
        from torch_tb_profiler import io as tb_io
        from torch_tb_profiler.profiler.loader import RunLoader
    except ImportError as err:
        found("torch-tb-profiler loader", f"not checked ({err})")
    else:
        loaded = RunLoader(os.path.basename(folder.rstrip(os.sep)), folder, tb_io.Cache(tempfile.mkdtemp())).load()
        profiles = [p for w in loaded.get_workers("Overview") for p in loaded.get_profiles(worker=w)]
        kernels = [bool(getattr(p, "has_kernel", False)) for p in profiles]
        check(bool(profiles) and (all(kernels) if cuda else True), "torch-tb-profiler's loader opens a window's trace"
              + (" with GPU kernels" if cuda else ""), f"{len(profiles)} profile(s), has_kernel {kernels}")
        found("torch-tb-profiler loader", f"{len(profiles)} profile(s), GPU kernels {kernels}")
    if not cuda:
        return
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError as err:
        found("HolisticTraceAnalysis", f"not checked ({err})")
        return
    breakdown = TraceAnalysis(trace_dir=folder).get_temporal_breakdown(visualize=False).to_dict("records")
    compute = breakdown[0].get("compute_time(us)", 0) if breakdown else 0
    check(compute > 0, "HolisticTraceAnalysis reads a window's trace with GPU kernels", f"compute {compute} µs")
    found("HolisticTraceAnalysis temporal breakdown", f"compute {compute} µs, idle {breakdown[0].get('idle_time(us)')} µs")
    # the same window's GPU idle share, ours against HTA's (HTA's span is first to last GPU activity without the last
    # step, ours the steps as the GPU ran them: close, not equal, on a GPU-bound model)
    hta_idle = breakdown[0].get("idle_time_pctg", float("nan")) / 100 if breakdown else float("nan")
    ours = float(run["windows"][0].get("profkit/window/gpu_idle_share") or "nan") if run["windows"] else float("nan")
    check(abs(ours - hta_idle) <= 0.1, "the first window's gpu_idle_share agrees with HTA's idle share (within 0.1)",
          f"ours {ours:.3f}, HTA {hta_idle:.3f}")


def scheduled(steps: int) -> list[tuple[int, int]]:
    """The windows the selection schedules: batches SKIP_FIRST + WARMUP ... of each of the two epochs."""
    first = SKIP_FIRST + WARMUP
    return [(e * steps + first, e * steps + first + ACTIVE - 1) for e in range(2)]


def nvml_clock() -> str:
    """One raw NVML sample timestamp beside time.time(), in µs: which clock NVML stamps samples with."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByUUID("GPU-" + str(torch.cuda.get_device_properties(0).uuid))
        _, samples = pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
        newest = max(s.timeStamp for s in samples)
        return f"newest NVML sample {newest} µs, time.time() {time.time() * 1e6:.0f} µs, difference {time.time() * 1e6 - newest:.0f} µs"
    except Exception as err:  # informational only
        return f"NVML timestamp not read: {err!r}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150, help="batches per epoch (NVML needs a few seconds)")
    parser.add_argument("--allow-cpu", action="store_true", help="without CUDA, run the CPU path instead of failing")
    parser.add_argument("--markdown", help="where to write the findings table (default: findings.md in the run folder)")
    parser.add_argument("--teardown-run", metavar="FOLDER", help=argparse.SUPPRESS)  # section 4's child
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    if not cuda and not args.allow_cpu:
        print("NOT CHECKED: no CUDA device (torch.cuda.is_available() is False)")
        return 3
    if args.teardown_run:
        teardown_run(args.teardown_run, cuda, args.steps)
        return 0
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
        check(probe.others >= 1, "sync detection sees a deliberate .item()", f"{probe.others} warning(s)")

    sync_log = SyncLog() if cuda else None
    runs = {
        "data-bound": fit(os.path.join(root, "data"), cuda, delay=0.02, depth=1, steps=args.steps, sync_log=sync_log),
        "compute-bound": fit(os.path.join(root, "compute"), cuda, delay=0.0, depth=1 if not cuda else 48,
                             steps=args.steps, sync_log=sync_log),
    }
    for label, run in runs.items():
        want = scheduled(args.steps)
        captures = sorted(set(run["traces"]) - set(want))
        check(all(w in run["traces"] for w in want), f"{label}: the scheduled window of each epoch is written",
              f"want steps {want}, found {sorted(run['traces'])} ({len(captures)} after {run['alerts']} alert(s))")
        check(len(run["epochs"]) == 2, f"{label}: epoch metrics logged twice", f"{len(run['epochs'])} rows")
        if not cuda:
            gpu = sorted(c for c in run["columns"] if "gpu" in c or "memory" in c)
            check(not gpu, f"{label}, CPU: no GPU metric is logged (absent, not zero)", ", ".join(gpu))
            continue
        kernels = {steps: sum(1 for e in events if e.get("cat") == "kernel") for steps, events in run["traces"].items()}
        check(bool(kernels) and min(kernels.values()) > 0, f"{label}: every window's trace holds GPU kernels",
              ", ".join(f"steps {a}-{b}: {n}" for (a, b), n in sorted(kernels.items())))
        w_idle = [float(r.get("profkit/window/gpu_idle_share") or "nan") for r in run["windows"]]
        check(bool(w_idle) and all(0 <= v <= 1 for v in w_idle), f"{label}: trace gpu_idle_ratio within [0, 1]", f"{w_idle}")
        peak = [float(r.get("profkit/peak_memory_mb") or "nan") for r in run["epochs"]]
        check(bool(peak) and all(v > 0 for v in peak), f"{label}: peak_memory_mb logged", f"{peak}")
    if cuda:
        idle = [float(r.get("profkit/gpu_idle_ratio") or "nan") for r in runs["data-bound"]["epochs"]]
        busy = [float(r.get("profkit/gpu_idle_ratio") or "nan") for r in runs["compute-bound"]["epochs"]]
        logged = bool(idle) and bool(busy) and all(0 <= v <= 1 for v in idle + busy)
        check(logged, "NVML gpu_idle_ratio logged every epoch within [0, 1]", f"data-bound {idle}, compute-bound {busy}")
        check(logged and min(idle) > max(busy), "NVML: the data-bound run idles more than the compute-bound one")
        print(f"# {nvml_clock()}")
        check(not sync_log.ours, "no device synchronisation from lightning_profkit on unprofiled steps (both fits)",
              f"{sum(sync_log.ours.values())} found" + "".join(f"\n{n} time(s) at:\n{where}" for where, n in sync_log.ours.items()))
        print(f"# synchronising calls during both fits (informational): {sync_log.others} from Lightning "
              f"or the model, {sync_log.background} in lightning_profkit's background threads")
    viewers(runs["compute-bound"], cuda)
    cost(root, cuda, args.steps)
    device = f"CUDA {torch.cuda.get_device_name()}" if cuda else "CPU only"
    table = [f"`.ci/check_cuda.py`, {time.strftime('%Y-%m-%d')}, torch {torch.__version__}, {device}, {args.steps} steps an epoch",
             "", "| finding | measured |", "|---|---|"] + [f"| {what} | {value} |" for what, value in findings]
    path = args.markdown or os.path.join(root, "findings.md")
    with open(path, "w") as f:
        f.write("\n".join(table) + "\n")
    print("\n".join(table) + f"\n# table written to {path}")
    print("ALL PASSED" if not failures else f"{len(failures)} FAILED: {'; '.join(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
