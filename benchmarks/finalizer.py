"""What the finalizing process costs per MB of a window's trace: CPU and peak memory against the JSON's size.

For raw traces of several sizes (the real A100 trace ``control.json.gz`` repeated in time, see ``large_traces.py``,
inflated as torch saves a window), each run is a fresh process that imports the finalizing code, then calls
``finalize_trace`` once: the rewrite into the gzip trace (the last step marker cut out, as past a window's end), its
figures and its sidecar. Printed per size (median of
``--repeats``, sizes interleaved): the CPU seconds of that call (user + system of the process), the seconds until the
trace was visible under its final name, and the process's peak resident memory above what it held before the call,
against the JSON's size.

    python benchmarks/finalizer.py [--sizes 30,100,300] [--repeats 3]
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from large_traces import SOURCE, repeated  # noqa: E402

# the finalizing process's work, measured from inside a fresh process
CHILD = r"""
import json, os, resource, sys, threading, time
from lightning_profkit.monitor.writing.child import finalize_trace
import lightning_profkit.trace.summary  # numpy too: imported once a fit, with the first window

raw, final, first, last = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def status(field):  # kB; VmHWM is this process's own peak (ru_maxrss may be the parent's, from the fork)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))
before = status("VmRSS")
seen = []
def watch():  # when the trace appears under its final name
    while not os.path.exists(final):
        time.sleep(0.002)
    seen.append(time.perf_counter())
threading.Thread(target=watch, daemon=True).start()
usage, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
finalize_trace(raw, final, {"rank": 0, "world_size": 1, "epoch": 0, "steps": [first, last]})
after = resource.getrusage(resource.RUSAGE_SELF)
cpu = after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime
print(json.dumps({"cpu_s": cpu, "visible_s": seen[0] - start if seen else None,
                  "peak_bytes": status("VmHWM") - before}))
"""

# landed main before the streaming rewrite (f896629), by the same measure: CPU s and peak memory of finalize_trace
BEFORE = {31: (1.77, 232), 93: (5.84, 540), 312: (18.6, 1710)}


def one(raw: str, final: str, steps: tuple[int, int]) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, raw, final, *map(str, steps)], capture_output=True, text=True,
                          check=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1"))
    for name in os.listdir(os.path.dirname(final)):
        os.remove(os.path.join(os.path.dirname(final), name))
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="30,100,300", help="MB of JSON, comma-separated (a copy is 31 MB)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="profkit-finalizer-")
    try:
        sizes, steps = {}, {}
        for mb in (float(s) for s in args.sizes.split(",")):
            gz = os.path.join(work, f"{mb:g}.json.gz")
            repeated(SOURCE, mb, gz)
            raw = os.path.join(work, f"{mb:g}.json")
            with gzip.open(gz, "rb") as f, open(raw, "wb") as out:
                shutil.copyfileobj(f, out)
            os.remove(gz)
            sizes[raw] = os.path.getsize(raw) / 1e6
            with open(raw, "rb") as f:
                numbers = sorted(int(n) for n in re.findall(rb'"ProfilerStep#(\d+)"', f.read()))
            steps[raw] = (numbers[0], numbers[-2])  # the window's last step is the one before the last marker
        out = os.path.join(work, "out")
        os.makedirs(out)
        runs: dict[str, list[dict]] = {p: [] for p in sizes}
        for _ in range(args.repeats):  # interleaved
            for raw in sizes:
                kept = raw + ".copy"  # finalize_trace removes its raw dump
                shutil.copyfile(raw, kept)
                runs[raw].append(one(kept, os.path.join(out, "w.pt.trace.json.gz"), steps[raw]))
        print(f"# {datetime.date.today()}, {os.cpu_count()} CPUs, median of {args.repeats}; one fresh process each")
        print("| JSON MB | CPU s | CPU ms per MB | visible after s | peak memory MB | peak / JSON | before: ms per MB, "
              "peak / JSON |")
        print("|---|---|---|---|---|---|---|")
        for raw, mb in sizes.items():
            cpu, visible, peak = (statistics.median(r[k] for r in runs[raw]) for k in ("cpu_s", "visible_s", "peak_bytes"))
            near = min(BEFORE, key=lambda m: abs(m - mb))
            was = f"{1000 * BEFORE[near][0] / near:.0f}, {BEFORE[near][1] / near:.1f}x ({near} MB)"
            print(f"| {mb:.0f} | {cpu:.2f} | {1000 * cpu / mb:.1f} | {visible:.2f} | {peak / 1e6:.0f} | "
                  f"{peak / 1e6 / mb:.2f}x | {was} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
