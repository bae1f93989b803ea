"""`profkit summary --json` against HolisticTraceAnalysis's temporal breakdown, on the same traces.

Each tool runs as a fresh process, as a user runs it (the ``profkit`` console script), after one untimed
warm-up, interleaved and repeated; peak memory comes from as many runs again, sampled. Wall time and
peak memory are the medians. Both tools run in a throwaway environment where lightning_profkit is
installed from this checkout as a user's ``pip install`` does, not as the dev environment's editable
install (whose import hook costs every Python start-up about 20 ms here); it sees the dev environment's
other packages through a ``.pth`` line. HTA computes only its temporal breakdown here; `profkit summary`
computes that and torch-tb-profiler's step breakdown, host-step figures and top operators. profkit runs
twice: as installed (a large trace is decoded on every core) and with ``--jobs 1`` (one process, like HTA).

    python benchmarks/summary_speed.py [--repeats 3] [TRACE ...]     (default: tests/data/traces)
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TRACES = os.path.join(ROOT, "tests", "data", "traces")
HTA = "import sys; from hta.trace_analysis import TraceAnalysis; TraceAnalysis(trace_dir=sys.argv[1]).get_temporal_breakdown(visualize=False)"


# As on a user's machine, where pip compiled both packages' byte code at install: let the warm-up runs write it;
# and with Python's usual buffered output.
ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED")}


def installed_copy(folder: str) -> str:
    """A virtual environment in ``folder`` with lightning_profkit installed from a copy of this checkout
    (not editable) and the dev environment's packages on its path; its ``bin`` folder."""
    env = os.path.join(folder, "env")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", env], check=True)
    python = os.path.join(env, "bin", "python")
    purelib = lambda py: subprocess.check_output(  # noqa: E731
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip()
    with open(os.path.join(purelib(python), "dev-environment.pth"), "w") as f:
        f.write(purelib(sys.executable) + "\n")
    source = os.path.join(folder, "source")  # setuptools writes build/ beside the sources
    shutil.copytree(os.path.join(ROOT, "lightning_profkit"), os.path.join(source, "lightning_profkit"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), source)
    subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps",
                    "--no-build-isolation", source], check=True)
    return os.path.dirname(python)


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        return []  # it ended


def _tree_pss(pid: int) -> int:
    """Proportional set size in KiB of a process and its children: pages they share are split between them."""
    total = 0
    try:
        for p in [pid, *_children(pid)]:
            with open(f"/proc/{p}/smaps_rollup") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
    except (OSError, StopIteration, ValueError):
        pass  # it ended between reads
    return total


# A small process that runs the tool and writes the largest peak RSS of its children (the tool and its
# workers) to argv[1]. A process's peak RSS counts the memory of the process it was forked from, and this
# one holds a large trace's objects while it makes the trace: measured straight from here, a 31 MB trace
# read 229 MB, this process's own size.
_LAUNCH = ("import resource, subprocess, sys; code = subprocess.call(sys.argv[2:], stdout=subprocess.DEVNULL, "
           "stderr=subprocess.DEVNULL); open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN)"
           ".ru_maxrss)); sys.exit(code)")


def run(cmd: list[str], sample: bool = False) -> tuple[float, float]:
    """Wall seconds of one child process, and, with ``sample``, its peak memory in MiB: the larger of its
    (or a worker's) peak RSS and the proportional set size of it and its worker processes together, sampled
    every 20 ms on a thread while this one waits for the exit. Timed runs do not sample (on a 2-core machine
    the sampling took about a tenth of profkit's time), and they start the tool from here, sampled runs
    from a small launcher (see ``_LAUNCH``)."""
    peak = [0]
    done = threading.Event()

    def sampler(launcher: int) -> None:
        while not done.wait(0.02):
            peak[0] = max(peak[0], sum(_tree_pss(child) for child in _children(launcher)))

    with tempfile.NamedTemporaryFile("r") as rss:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", _LAUNCH, rss.name, *cmd] if sample else cmd,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
        thread = threading.Thread(target=sampler, args=(proc.pid,))
        if sample:
            thread.start()
        _, status, _ = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - start
        done.set()
        if sample:
            thread.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}")
        return elapsed, max(int(rss.read() or 0) if sample else 0, peak[0]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("traces", nargs="*")
    args = parser.parse_args()
    traces = args.traces or [
        os.path.join(TRACES, p) for p in (
            "hta/trace_diff_control/control.json.gz",
            "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
            "hta/df_index_resolver/df_index_resolver.json.gz",
            "hta/amd_mi250/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
        )
    ]
    bin_dir = installed_copy(tempfile.mkdtemp(prefix="profkit-installed-"))
    profkit, python = os.path.join(bin_dir, "profkit"), os.path.join(bin_dir, "python")
    rows = []
    for path in traces:
        folder = tempfile.mkdtemp(prefix="profkit-hta-")  # HTA reads a folder of traces
        os.symlink(os.path.abspath(path), os.path.join(folder, os.path.basename(path)))
        tools = {
            "profkit": [profkit, "summary", "--json", path],  # decodes on every core
            "profkit --jobs 1": [profkit, "summary", "--json", "--jobs", "1", path],
            "hta": [python, "-c", HTA, folder],
        }
        seconds: dict[str, list[float]] = {t: [] for t in tools}
        peak_mb: dict[str, list[float]] = {t: [] for t in tools}
        kept = path + ".profkit"  # the summary profkit keeps beside a trace it read: each run parses the trace

        def parsed(cmd: list[str], sample: bool = False) -> tuple[float, float]:
            with contextlib.suppress(FileNotFoundError):
                os.remove(kept)
            return run(cmd, sample)

        for cmd in tools.values():  # warm-up, untimed: byte code and the file in the page cache
            parsed(cmd)
        for r in range(args.repeats):
            for name in (list(tools) if r % 2 == 0 else list(tools)[::-1]):
                seconds[name].append(parsed(tools[name])[0])
        for r in range(args.repeats):  # memory, in runs of their own
            for name in tools:
                peak_mb[name].append(parsed(tools[name], sample=True)[1])
        with contextlib.suppress(FileNotFoundError):
            os.remove(kept)
        med = {t: (statistics.median(seconds[t]), statistics.median(peak_mb[t])) for t in tools}
        rows.append((os.path.basename(path), os.path.getsize(path) / 2**20, med))
    print(f"# {datetime.date.today()}, {os.cpu_count()} CPUs, median of {args.repeats}, one process per run "
          "(start-up and imports included); peak MB counts worker processes too")
    print("| trace | gz MB | profkit s | --jobs 1 s | HTA s | speed-up | --jobs 1 speed-up | profkit peak MB "
          "| --jobs 1 peak MB | HTA peak MB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, size, med in rows:
        (ps, pm), (ss, sm), (hs, hm) = med["profkit"], med["profkit --jobs 1"], med["hta"]
        print(f"| {name} | {size:.1f} | {ps:.2f} | {ss:.2f} | {hs:.2f} | {hs / ps:.1f}x | {hs / ss:.1f}x "
              f"| {pm:.0f} | {sm:.0f} | {hm:.0f} |")

if __name__ == "__main__":
    main()
