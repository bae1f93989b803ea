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
as one window per epoch. What the window's save hands to the finalizing process (the JSON rewrite, gzip and
figures) is counted apart, whole: a fit's window is written as usual (outside callgrind), its trace is
handed again to ``python -m lightning_profkit.monitor.writing.child`` run under callgrind from its start, and that
count (the process's start-up and imports, once a fit, and the window's work) is added to the default
window's fit in the "all processes" columns. The training process's threads (the writer's save too) are
counted in its own figures.

Each fit runs without address-space randomisation (``setarch``), so that two runs of the same code agree
to a few instructions in a million. Where things lie in memory still decides which attribute lookups hit
CPython's type cache, so a change in any code that runs can move a step's count by about 0.1-0.2%.

Needs valgrind, its header (``valgrind/callgrind.h``) and a C compiler, for the two-function library that
switches collection on and off.

With ``--after-a-first-fit`` each counted fit follows a first, uncounted 30-step fit of the same configuration in
its process: what a process's first window sets up once is then outside the count.

    python benchmarks/instructions.py [--short 100] [--long 400] [--steps 3000] [--jobs 2] [--after-a-first-fit]
"""

from __future__ import annotations

import argparse
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

HERE = os.path.dirname(os.path.abspath(__file__))
SWITCH_C = """#include <valgrind/callgrind.h>
void collect_on(void) { CALLGRIND_START_INSTRUMENTATION; }
void collect_off(void) { CALLGRIND_STOP_INSTRUMENTATION; }
"""
CONFIGS = {
    "none": "no callback",
    "quiet": "a callback without per-batch hooks (control: should read 0)",
    "noop": "a no-op callback (Lightning's dispatch of its hooks)",
    "metrics": "metrics only: `PerformanceMonitor(profile=False, capture_on_alert=False)`",
    "windows": "metrics + the default window (one a fit here): `PerformanceMonitor(capture_on_alert=False)`",
}
GOALS = {"metrics": "<= 1.005", "windows": "<= 1.02"}
OURS = ("metrics", "windows")  # the configurations that look for capture requests
POLLS = {"never": float("inf"), "every step": 0.0}  # the capture-request poll's interval in the metrics fits
WEIGHTS = {"Ir": 1, "I1mr": 10, "D1mr": 10, "D1mw": 10, "ILmr": 100, "DLmr": 100, "DLmw": 100}


def child(config: str, steps: int, poll_interval: float, switch: str) -> None:
    """Run one fit with callgrind's collection on only inside it."""
    import torch

    sys.path.insert(0, HERE)
    from overhead import make_fit

    from lightning_profkit.capture_request import RequestPoller
    from lightning_profkit.monitor import fit as fit_run

    RequestPoller.__init__.__defaults__ = (poll_interval,)
    fit_run.OWNER_CHECK_S = poll_interval  # the ownership check (every 10 s of a real fit) comes with a look
    torch.set_num_threads(1)
    if os.environ.get("PROFKIT_CG_AFTER_A_FIRST_FIT"):  # --after-a-first-fit: what a process's first fit sets up once
        make_fit(config, 30, tempfile.mkdtemp(prefix="profkit-cg-"))()
    lib = ctypes.CDLL(switch)
    fit = make_fit(config, steps, tempfile.mkdtemp(prefix="profkit-cg-"))
    lib.collect_on()
    fit()
    lib.collect_off()


def counts(config: str, steps: int, poll: str, switch: str, out_dir: str) -> dict[str, int]:
    """Callgrind's totals of one fit in a fresh process."""
    out = os.path.join(out_dir, f"{config}.{steps}.{poll.replace(' ', '-')}.out")
    env = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
    # Without address randomisation two runs of a fit differ by a few instructions in a million; with it, by
    # some thousand a step (which attribute lookups hit CPython's type cache depends on the addresses).
    fixed = ["setarch", os.uname().machine, "--addr-no-randomize"] if shutil.which("setarch") else []
    subprocess.run(
        [*fixed, "valgrind", "--tool=callgrind", "--instr-atstart=no", "--cache-sim=yes", f"--callgrind-out-file={out}",
         sys.executable, os.path.abspath(__file__), "--child", config, str(steps), str(POLLS[poll]), switch],
        check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    return totals(out)


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


def finalizer_counts(folder: str) -> dict[str, int]:
    """Callgrind's totals of a finalizing process, from its start to its exit, serving one default window of
    the benchmark's fit."""
    sys.path.insert(0, HERE)
    from overhead import make_fit

    from lightning_profkit.monitor.writing.process import CHILD, child_env

    run = os.path.join(folder, "trace-fit")
    make_fit("windows", 100, run)()
    (trace,) = glob.glob(os.path.join(run, "**", "*.pt.trace.json.gz"), recursive=True)
    raw = os.path.join(folder, "window.raw.json")
    with gzip.open(trace, "rb") as f, open(raw, "wb") as out:
        out.write(f.read())
    job = json.dumps({"raw": raw, "final": os.path.join(folder, "w.pt.trace.json.gz"), "meta": {"rank": 0, "world_size": 1}})
    out = os.path.join(folder, "finalizer.out")
    fixed = ["setarch", os.uname().machine, "--addr-no-randomize"] if shutil.which("setarch") else []
    subprocess.run([*fixed, "valgrind", "--tool=callgrind", "--cache-sim=yes", f"--callgrind-out-file={out}",
                    sys.executable, "-m", CHILD], input=job + "\n", text=True, check=True,
                   env={**child_env(), "PYTHONHASHSEED": "0"}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return totals(out)


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
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        config, steps, interval, switch = args.child
        return child(config, int(steps), float(interval), switch)
    if args.long <= args.short:
        parser.error("--long must be more steps than --short")

    if args.after_a_first_fit:
        os.environ["PROFKIT_CG_AFTER_A_FIRST_FIT"] = "1"  # read by each fit's process
    folder = tempfile.mkdtemp(prefix="profkit-callgrind-")
    switch = build_switch(folder)
    polls = {c: list(POLLS) if c == "metrics" else ["never"] for c in CONFIGS}
    runs = [(c, n, p) for c in CONFIGS for p in polls[c] for n in (args.short, args.long)]
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        got = dict(zip(runs, pool.map(lambda r: counts(*r, switch, folder), runs)))
    finalizer = finalizer_counts(folder)

    def figures(config: str, poll: str = "never") -> dict[str, tuple[float, float]]:
        """Per event kind (and estimated cycles): the cost of a step and the fit's fixed cost."""
        short, long = got[(config, args.short, poll)], got[(config, args.long, poll)]
        out = {}
        for kind in short:
            step = (long[kind] - short[kind]) / (args.long - args.short)
            out[kind] = (step, short[kind] - args.short * step)
        return out

    base, metrics = figures("none"), figures("metrics")
    per_poll = {k: step - metrics[k][0] for k, (step, _) in figures("metrics", "every step").items()}
    after = ", each after a first fit in its process" if args.after_a_first_fit else ""
    print(f"# {datetime.date.today()}, callgrind, fits of {args.short} and {args.long} steps{after} "
          f"(1 thread); ratios for a fit of {args.steps} steps")
    print("| configuration | instructions a step | added a step | estimated cycles a step | added a step "
          f"| {args.steps}-step fit, instructions | {args.steps}-step fit, estimated cycles | all processes, instructions "
          "| all processes, estimated cycles | goal |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for config, label in CONFIGS.items():
        fig = figures(config)
        if config in OURS:  # one look for a request every --poll-every steps
            fig = {k: (step + per_poll[k] / args.poll_every, fixed) for k, (step, fixed) in fig.items()}

        def fit_ratio(kind: str, others: float = 0.0) -> float:
            (step, fixed), (base_step, base_fixed) = fig[kind], base[kind]
            return (fixed + others + args.steps * step) / (base_fixed + args.steps * base_step)

        children = {k: finalizer[k] if config == "windows" else 0 for k in ("Ir", "cycles")}
        ir, cycles = fig["Ir"][0], fig["cycles"][0]
        print(f"| {label} | {ir:,.0f} | {ir - base['Ir'][0]:+,.0f} ({ir / base['Ir'][0] - 1:+.3%}) "
              f"| {cycles:,.0f} | {cycles - base['cycles'][0]:+,.0f} ({cycles / base['cycles'][0] - 1:+.3%}) "
              f"| {fit_ratio('Ir'):.4f} | {fit_ratio('cycles'):.4f} | {fit_ratio('Ir', children['Ir']):.4f} "
              f"| {fit_ratio('cycles', children['cycles']):.4f} | {GOALS.get(config, '')} |")
    print(f"\nOne look for a capture request: {per_poll['Ir']:,.0f} instructions, {per_poll['cycles']:,.0f} estimated "
          f"cycles; counted above once every {args.poll_every:g} steps.")
    print(f"The finalizing process serving one default window, whole: {finalizer['Ir']:,.0f} instructions, "
          f"{finalizer['cycles']:,.0f} estimated cycles (in the default window's all-process columns).")


if __name__ == "__main__":
    main()
