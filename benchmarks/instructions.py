"""What PerformanceMonitor costs a training step, counted by valgrind's callgrind: instructions and
simulated cache misses, which do not depend on what else the machine is doing.

``overhead.py`` times the same fits by the clock; on a shared 2-core machine its per-step figure has an
error of a few µs, about the whole 0.5% goal. Here each configuration's fit (the same model and data as
``overhead.py``: no callback | a callback without per-batch hooks | a no-op callback | metrics only |
metrics + the default window) runs under callgrind, counted only inside ``trainer.fit`` (collection is
switched on and off around it, so the imports are not counted), once with ``--short`` and once with
``--long`` steps. The difference of the two, divided by the steps between them, is the cost of a step; what
is left of the short fit is the fit's fixed cost (set-up, the window, the epoch's end). From those, the
script prints the ratio for a fit of ``--steps`` steps. The "estimated cycles" are callgrind's usual
estimate, instructions + 10 x first-level misses + 100 x last-level misses, on the cache it simulates.

Under callgrind a step takes 50-100 times as long, so what the callback does once a second of the clock (it
looks for a capture request) would come every few steps instead of every few hundred. Our fits therefore
run with that interval set to never (one look at the first step); metrics only runs also with it set to
every step, and the difference is the cost of one look, which our rows add at the rate of a real fit, once
every ``--poll-every`` steps (625: one second of 1.6 ms steps). The default window (skip 10 steps, warm up
1, record 3) falls in both fits, so it counts in the fixed cost: one window per fit of ``--steps`` steps,
as one window per epoch. A window of at most a MB of JSON (this fit's) is finalized in the writer thread and
counted in the fit. A larger one's finalizing process (the JSON rewrite, gzip and figures) would be counted apart,
whole: its trace handed again to ``python -m lightning_profkit.monitor.writing.child`` run under callgrind from its
start, that count (the process's start-up and imports, once a fit, and the window's work) added to the default
window's fit in the "all processes" columns. The training process's threads (the writer's save too) are
counted in its own figures.

Each fit runs without address-space randomisation (``setarch``), so that two runs of the same code agree
to a few instructions in a million, and with valgrind's fair scheduling, so that a thread waiting for the GIL
gets it as on a real machine. Where things lie in memory still decides which attribute lookups hit
CPython's type cache, so a change in any code that runs can move a step's count by about 0.1-0.2%: as much as
the goals. ``--direct`` counts past that spread: only inside the functions through which a fit reaches a
callback or the fetch timer (Lightning's dispatch of callback hooks, its whole loop over the callbacks and
every hook called; the training loop's pair around each fetch, Lightning's or the fetch timer's in its place),
in every configuration alike, against the whole fit without a callback. Those functions count about 250,000
instructions a step, so the spread moves them by a few hundred. What it leaves out is what the callback
changes elsewhere: where things lie, what the garbage collector visits; the whole counts bound that. The
default window is left out of ``--direct``: its profiler records inside torch's operators, and its writer
thread runs while the hooks are counted. A fit in which those functions were called fewer times than it has
steps (Lightning or the fetch timer no longer goes through them) stops the benchmark with their names.

``--idle-thread`` starts one idle thread in every fit's process before its fit, as a TensorBoard logger, CUDA
or ``pin_memory`` do in most real fits. Once a process has had a second thread, glibc's malloc and free take
their arena's lock on the calls a thread's own cache does not serve, for the rest of the process. The
profiler's own thread and the trace writer's make it so from the default window on, which in this otherwise
single-threaded fit adds about 8,000 instructions to every later step: an idle thread started before a
metrics-only fit adds as much, in the same functions (glibc's ``_int_free``, ``malloc``, mutex unlocks).

Needs valgrind, its header (``valgrind/callgrind.h``) and a C compiler, for the small library that switches
instrumentation and collection on and off.

With ``--after-a-first-fit`` each counted fit follows a first, uncounted 30-step fit of the same configuration in
its process: what a process's first window sets up once is then outside the count.

That spread comes mostly from string hashes: which names collide in CPython's type cache and in dicts depends
on ``PYTHONHASHSEED``. With ``--seeds N`` every fit is counted under N hash seeds (0 to N-1), the table shows
their mean, and a second table each seed's ratios with the mean's standard error, so that a goal closer than
one run's spread can be judged on the mean. ``--configs`` counts only some configurations (``none`` always).

    python benchmarks/instructions.py [--short 100] [--long 400] [--steps 3000] [--jobs 2] [--after-a-first-fit]
                                      [--seeds 1] [--configs none,quiet,noop,metrics,windows] [--direct]
                                      [--idle-thread]
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import ctypes
import datetime
import glob
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
SWITCH_C = """#include <valgrind/callgrind.h>
void collect_on(void) { CALLGRIND_START_INSTRUMENTATION; }
void collect_off(void) { CALLGRIND_STOP_INSTRUMENTATION; }
void toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
"""
CONFIGS = {
    "none": "no callback",
    "quiet": "a callback without per-batch hooks (Lightning still looks each hook up)",
    "noop": "a no-op callback (Lightning's dispatch of its hooks)",
    "metrics": "metrics only: `PerformanceMonitor(profile=False, capture_on_alert=False)`",
    "windows": "metrics + the default window (one a fit here): `PerformanceMonitor(capture_on_alert=False)`",
}
GOALS = {"metrics": "<= 1.002", "windows": "<= 1.005"}  # issue 30
OURS = ("metrics", "windows")  # the configurations that look for capture requests
POLLS = {"never": float("inf"), "every step": 0.0}  # the capture-request poll's interval in the metrics fits
WEIGHTS = {"Ir": 1, "I1mr": 10, "D1mr": 10, "D1mw": 10, "ILmr": 100, "DLmr": 100, "DLmw": 100}


def count_only_where_lightning_calls_us(lib: ctypes.CDLL) -> collections.Counter:
    """Count only inside the functions through which a fit reaches a callback or the fetch timer, whichever runs:
    Lightning's dispatch of callback hooks (all of it: its loop over the callbacks, every hook it calls) and the
    training loop's pair around each fetch (Lightning's own, or the fetch timer's in its place). Returns the
    calls of each, by qualified name, as they come."""
    import functools

    from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop
    from lightning.pytorch.trainer import call

    from lightning_profkit.monitor.timing.fetch_timer import FetchTimer

    inside = [False]
    calls: collections.Counter = collections.Counter()

    def counted(fn: Any) -> Any:
        @functools.wraps(fn)
        def region(*args: Any, **kwargs: Any) -> Any:
            if inside[0]:
                return fn(*args, **kwargs)
            inside[0] = True
            calls[fn.__qualname__] += 1
            lib.toggle()
            try:
                return fn(*args, **kwargs)
            finally:
                lib.toggle()
                inside[0] = False

        return region

    call._call_callback_hooks = counted(call._call_callback_hooks)  # call.py's own calls read its global too
    for owner, names in ((_TrainingEpochLoop, ("_on_before_fetch", "_on_after_fetch")),
                         (FetchTimer, ("_train_before", "_train_after"))):
        for name in names:
            setattr(owner, name, counted(getattr(owner, name)))
    return calls


def child(config: str, steps: int, poll_interval: float, switch: str, regions: bool) -> None:
    """Run one fit with callgrind's instrumentation on only inside it (with ``regions``, collection only inside
    :func:`count_only_where_lightning_calls_us`'s functions)."""
    import torch

    sys.path.insert(0, HERE)
    from overhead import make_fit

    from lightning_profkit import capture_request
    from lightning_profkit.monitor import fit as fit_run

    capture_request.POLL_S = poll_interval
    fit_run.OWNER_CHECK_S = poll_interval  # the ownership check (every 10 s of a real fit) comes with a look
    torch.set_num_threads(1)
    if os.environ.get("PROFKIT_CG_IDLE_THREAD"):  # --idle-thread: one more thread, as a logger's or CUDA's
        threading.Thread(target=threading.Event().wait, name="idle", daemon=True).start()
    if os.environ.get("PROFKIT_CG_AFTER_A_FIRST_FIT"):  # --after-a-first-fit: what a process's first fit sets up once
        make_fit(config, 30, tempfile.mkdtemp(prefix="profkit-cg-"))()
    lib = ctypes.CDLL(switch)
    calls = count_only_where_lightning_calls_us(lib) if regions else None
    fit = make_fit(config, steps, tempfile.mkdtemp(prefix="profkit-cg-"))
    lib.collect_on()
    fit()
    lib.collect_off()
    if calls is not None:
        pair = "FetchTimer._train_before" if config in OURS else "_TrainingEpochLoop._on_before_fetch"
        for name in ("_call_callback_hooks", pair):
            if calls[name] < steps:  # Lightning or the fetch timer no longer goes through it: the count would miss it
                sys.exit(f"--direct: {name} was called {calls[name]} times in a fit of {steps} steps")


def counts(seed: int, config: str, steps: int, poll: str, where: str, switch: str, out_dir: str) -> dict[str, int]:
    """Callgrind's totals of one fit in a fresh process, under hash seed ``seed``: of the ``whole`` fit, or only
    ``ours``: where Lightning calls a callback or the fetch timer (:func:`count_only_where_lightning_calls_us`)."""
    out = os.path.join(out_dir, f"{config}.{steps}.{poll.replace(' ', '-')}.{where}.{seed}.out")
    env = {**os.environ, "PYTHONHASHSEED": str(seed), "OMP_NUM_THREADS": "1"}
    collect = ["--collect-atstart=no"] if where == "ours" else []
    done = subprocess.run(
        [*callgrind(out, "--instr-atstart=no", *collect), sys.executable, os.path.abspath(__file__), "--child", config,
         str(steps), str(POLLS[poll]), switch, where],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    if done.returncode:
        said = [line for line in done.stderr.splitlines() if not line.startswith("==")]  # not valgrind's summary
        raise SystemExit(f"the {config} fit of {steps} steps under callgrind failed (exit status {done.returncode}):\n"
                         + "\n".join(said[-5:]))
    return totals(out)


def callgrind(out: str, *options: str) -> list[str]:
    """The command line that runs a program under callgrind, its counts written to ``out``."""
    # Without address randomisation two runs of a fit differ by a few instructions in a million; with it, by
    # some thousand a step (which attribute lookups hit CPython's type cache depends on the addresses).
    fixed = ["setarch", os.uname().machine, "--addr-no-randomize"] if shutil.which("setarch") else []
    # Valgrind runs one thread at a time; by default it may leave a thread that waits for the GIL (the trace writer,
    # after a window) waiting for the rest of the fit, and every later release of the GIL signals it: about 4,700
    # instructions a step that a real machine, where the thread takes the GIL within 5 ms, never pays (measured).
    # Fair scheduling hands the threads their turns as a real machine does.
    return [*fixed, "valgrind", "--tool=callgrind", "--fair-sched=yes", "--cache-sim=yes", f"--callgrind-out-file={out}",
            *options]


def totals(path: str) -> dict[str, int]:
    """Callgrind's totals in the output file ``path``, with the estimated cycles as ``cycles``."""
    events: list[str] = []
    with open(path) as f:
        for line in f:
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("totals:"):
                found = dict(zip(events, map(int, line.split()[1:])))
                return {**found, "cycles": sum(w * found.get(k, 0) for k, w in WEIGHTS.items())}
    raise SystemExit(f"no totals in {path}")


def finalizer_counts(folder: str) -> tuple[dict[str, int], int]:
    """Callgrind's totals of a finalizing process serving one default window of the benchmark's fit, from its start
    to its exit, and the window's bytes of JSON; zeros where the window is small enough to be finalized in the writer
    thread (``IN_THREAD_BYTES``), whose work the fit's own count holds."""
    sys.path.insert(0, HERE)
    from overhead import make_fit

    from lightning_profkit.monitor.writing.process import CHILD, child_env
    from lightning_profkit.monitor.writing.writer import IN_THREAD_BYTES

    run = os.path.join(folder, "trace-fit")
    make_fit("windows", 100, run)()
    (trace,) = glob.glob(os.path.join(run, "**", "*.pt.trace.json.gz"), recursive=True)
    raw = os.path.join(folder, "window.raw.json")
    with gzip.open(trace, "rb") as f, open(raw, "wb") as out:
        out.write(f.read())
    size = os.path.getsize(raw)
    if size <= IN_THREAD_BYTES:
        return {"Ir": 0, "cycles": 0}, size
    job = json.dumps({"raw": raw, "final": os.path.join(folder, "w.pt.trace.json.gz"), "meta": {"rank": 0, "world_size": 1}})
    out = os.path.join(folder, "finalizer.out")
    subprocess.run([*callgrind(out), sys.executable, "-m", CHILD], input=job + "\n", text=True, check=True,
                   env={**child_env(), "PYTHONHASHSEED": "0"}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return totals(out), size


def build_switch(folder: str) -> str:
    src, lib = os.path.join(folder, "switch.c"), os.path.join(folder, "switch.so")
    with open(src, "w") as f:
        f.write(SWITCH_C)
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", lib, src], check=True)
    return lib


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--short", type=int, default=100)
    parser.add_argument("--long", type=int, default=400)
    parser.add_argument("--steps", type=int, default=3000, help="the fit length the ratios are for")
    parser.add_argument("--poll-every", type=float, default=625, help="steps between two looks for a request")
    parser.add_argument("--jobs", type=int, default=2, help="fits counted at once (the counts do not change)")
    parser.add_argument("--after-a-first-fit", action="store_true",
                        help="count each fit after a first 30-step fit of the same configuration in its process")
    parser.add_argument("--seeds", type=int, default=1, help="hash seeds each fit is counted under (0 to N-1)")
    parser.add_argument("--configs", default=",".join(CONFIGS), help="the configurations to count, comma-separated")
    parser.add_argument("--idle-thread", action="store_true",
                        help="start one idle thread in each fit's process before the fit (glibc's malloc then locks)")
    parser.add_argument("--direct", action="store_true",
                        help="count only where Lightning calls a callback or the fetch timer (not the default window)")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        config, steps, interval, switch, where = args.child
        return child(config, int(steps), float(interval), switch, where == "ours")
    if args.long <= args.short:
        parser.error("--long must be more steps than --short")
    configs = {c: CONFIGS[c] for c in CONFIGS if c == "none" or c in args.configs.split(",")}
    if args.seeds < 1 or set(args.configs.split(",")) - set(CONFIGS):
        parser.error(f"--seeds must be at least 1 and --configs a subset of {','.join(CONFIGS)}")
    if args.direct and configs.pop("windows", None):
        print("# --direct leaves out the default window: its profiler records inside torch's operators, and its "
              "writer thread runs while the hooks are counted")

    if args.after_a_first_fit:
        os.environ["PROFKIT_CG_AFTER_A_FIRST_FIT"] = "1"  # read by each fit's process
    if args.idle_thread:
        os.environ["PROFKIT_CG_IDLE_THREAD"] = "1"
    folder = tempfile.mkdtemp(prefix="profkit-callgrind-")
    switch = build_switch(folder)
    seeds = range(args.seeds)
    where = "ours" if args.direct else "whole"
    # The cost of one look for a request is counted under the first seed only: it is added once per --poll-every steps.
    polls = {c: list(POLLS) if c == "metrics" else ["never"] for c in configs}
    runs = [(s, c, n, p, where) for s in seeds for c in configs for p in polls[c] for n in (args.short, args.long)
            if p == "never" or s == 0]
    if args.direct:  # the whole fit without a callback: what the ratios are of
        runs += [(s, "none", n, "never", "whole") for s in seeds for n in (args.short, args.long)]
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        got = dict(zip(runs, pool.map(lambda r: counts(*r, switch, folder), runs)))
    finalizer, window_json = finalizer_counts(folder) if "windows" in configs else ({"Ir": 0, "cycles": 0}, 0)

    def figures(config: str, seed: int, poll: str = "never", counted: str = where) -> dict[str, tuple[float, float]]:
        """Per event kind (and estimated cycles): the cost of a step and the fit's fixed cost, under one seed."""
        short, long = got[(seed, config, args.short, poll, counted)], got[(seed, config, args.long, poll, counted)]
        out = {}
        for kind in short:
            step = (long[kind] - short[kind]) / (args.long - args.short)
            out[kind] = (step, short[kind] - args.short * step)
        return out

    per_poll = {}
    if "metrics" in configs:
        metrics = figures("metrics", 0)
        per_poll = {k: step - metrics[k][0] for k, (step, _) in figures("metrics", 0, "every step").items()}

    def seed_figures(config: str, seed: int, counted: str = where) -> dict[str, tuple[float, float]]:
        """As ``figures``, with one look for a request every --poll-every steps in our configurations."""
        fig = figures(config, seed, counted=counted)
        if config in OURS and per_poll:
            fig = {k: (step + per_poll[k] / args.poll_every, fixed) for k, (step, fixed) in fig.items()}
        return fig

    def mean_figures(config: str, counted: str = where) -> dict[str, tuple[float, float]]:
        each = [seed_figures(config, s, counted) for s in seeds]
        return {k: tuple(sum(f[k][i] for f in each) / len(each) for i in (0, 1)) for k in each[0]}

    def fit_ratio(fig: dict, base: dict, whole: dict, kind: str, others: float = 0.0) -> float:
        """A fit of --steps steps in ``fig``'s configuration against the ``whole`` fit without a callback, where
        ``fig`` and ``base`` (no callback) were counted alike: wholly (then ``whole`` is ``base``) or --direct."""
        (step, fixed), (base_step, base_fixed), (whole_step, whole_fixed) = fig[kind], base[kind], whole[kind]
        total = whole_fixed + args.steps * whole_step
        return (total + fixed - base_fixed + args.steps * (step - base_step) + others) / total

    base, whole = mean_figures("none"), mean_figures("none", "whole")
    after = ", each after a first fit in its process" if args.after_a_first_fit else ""
    after += ", one idle thread in each fit's process" if args.idle_thread else ""
    mean = f", the mean of {args.seeds} hash seeds" if args.seeds > 1 else ""
    counted = (" counted only where Lightning calls a callback or the fetch pair (--direct), against the whole fit "
               "without a callback;" if args.direct else "")
    print(f"# {datetime.date.today()}, callgrind,{counted} fits of {args.short} and {args.long} steps{after}{mean} "
          f"(1 thread); ratios for a fit of {args.steps} steps")
    there = " counted" if args.direct else ""
    print(f"| configuration | instructions a step{there} | added a step | estimated cycles a step{there} | added a step "
          f"| added once a fit, instructions | {args.steps}-step fit, instructions | {args.steps}-step fit, estimated "
          "cycles | all processes, instructions | all processes, estimated cycles | goal |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for config, label in configs.items():
        fig = mean_figures(config)
        children = {k: finalizer[k] if config == "windows" else 0 for k in ("Ir", "cycles")}
        ir, cycles = fig["Ir"][0], fig["cycles"][0]
        print(f"| {label} | {ir:,.0f} | {ir - base['Ir'][0]:+,.0f} ({(ir - base['Ir'][0]) / whole['Ir'][0]:+.3%}) "
              f"| {cycles:,.0f} | {cycles - base['cycles'][0]:+,.0f} "
              f"({(cycles - base['cycles'][0]) / whole['cycles'][0]:+.3%}) | {fig['Ir'][1] - base['Ir'][1]:+,.0f} "
              f"| {fit_ratio(fig, base, whole, 'Ir'):.4f} | {fit_ratio(fig, base, whole, 'cycles'):.4f} "
              f"| {fit_ratio(fig, base, whole, 'Ir', children['Ir']):.4f} "
              f"| {fit_ratio(fig, base, whole, 'cycles', children['cycles']):.4f} | {GOALS.get(config, '')} |")
    if {"metrics", "windows"} <= set(configs):
        window, metrics = mean_figures("windows"), mean_figures("metrics")
        after_window = window["Ir"][0] - metrics["Ir"][0]
        print(f"\nThe default window against metrics only: {window['Ir'][1] - metrics['Ir'][1]:+,.0f} instructions once "
              f"a fit (torch's profiler on the window's steps, its stop, the writer thread's save), {after_window:+,.0f} "
              f"a step after it ({after_window / whole['Ir'][0]:+.3%} of a step without a callback).")
    if args.direct:
        print(f"\n(The percentages are of the whole step without a callback: {whole['Ir'][0]:,.0f} instructions, "
              f"{whole['cycles'][0]:,.0f} estimated cycles.)")
    if args.seeds > 1:
        print(f"\nEach hash seed's {args.steps}-step fit, instructions (each seed's configuration against its own "
              "no-callback fit), with the mean and its standard error:")
        print("| configuration | " + " | ".join(f"seed {s}" for s in seeds) + " | mean ± standard error |")
        print("|---|" + "---|" * (args.seeds + 1))
        for config, label in configs.items():
            ratios = [fit_ratio(seed_figures(config, s), seed_figures("none", s), seed_figures("none", s, "whole"), "Ir")
                      for s in seeds]
            avg = sum(ratios) / len(ratios)
            error = (sum((r - avg) ** 2 for r in ratios) / (len(ratios) - 1) / len(ratios)) ** 0.5
            print(f"| {config} | " + " | ".join(f"{r:.4f}" for r in ratios) + f" | {avg:.4f} ± {error:.4f} |")
    if per_poll:
        print(f"\nOne look for a capture request: {per_poll['Ir']:,.0f} instructions, {per_poll['cycles']:,.0f} "
              f"estimated cycles; counted above once every {args.poll_every:g} steps.")
    if "windows" in configs and finalizer["Ir"]:
        print(f"The finalizing process serving one default window ({window_json / 1e3:.0f} kB of JSON), whole: "
              f"{finalizer['Ir']:,.0f} instructions, {finalizer['cycles']:,.0f} estimated cycles (in the default "
              "window's all-process columns).")
    elif "windows" in configs:
        print(f"The default window ({window_json / 1e3:.0f} kB of JSON) is finalized in the writer thread, counted in "
              "the fit: no finalizing process.")

if __name__ == "__main__":
    main()
