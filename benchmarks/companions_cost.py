"""What the sidecar and the events table (Parquet) cost the finalizing process, per MB of a trace's JSON.

For traces of several sizes (the real A100 trace ``control.json.gz`` repeated in time, see ``large_traces.py``),
this process runs the finalizing process's own functions: ``finalize_trace`` whole (rewrite the raw JSON into the
gzip trace, parse it for the window's figures, write the companions), then, on the trace it wrote, each companion
alone: the sidecar (``dumps`` of the summary, written) and the events table (``table_of`` the rows, ``to_parquet``,
written). CPU seconds of this process (``time.process_time``), sizes interleaved, median of ``--repeats``.

    python benchmarks/companions_cost.py [--sizes 30,100,300] [--repeats 3]
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from large_traces import SOURCE, repeated  # noqa: E402

from lightning_profkit.atomic_files import write_atomic  # noqa: E402
from lightning_profkit.companions import EVENTS  # noqa: E402
from lightning_profkit.monitor.writing.child import finalize_trace  # noqa: E402
from lightning_profkit.trace import event_table  # noqa: E402
from lightning_profkit.trace.columns import from_rows  # noqa: E402
from lightning_profkit.trace.load import load  # noqa: E402
from lightning_profkit.trace.sidecar import dumps, sidecar_of  # noqa: E402
from lightning_profkit.trace.summary import summarize_trace  # noqa: E402


def cpu(work) -> float:
    start = time.process_time()
    work()
    return time.process_time() - start


def one(folder: str, gz: str) -> tuple[float, float, float]:
    """CPU seconds of the whole finalization, of the sidecar and of the events table, for the trace ``gz``."""
    raw, final = os.path.join(folder, "w.raw"), os.path.join(folder, "w.pt.trace.json.gz")
    with gzip.open(gz, "rb") as f, open(raw, "wb") as out:
        shutil.copyfileobj(f, out)
    whole = cpu(lambda: finalize_trace(raw, final, {"rank": 0, "world_size": 1}))
    trace = load(final)
    summary = summarize_trace(final, trace)
    status = os.stat(final)
    sidecar = cpu(lambda: write_atomic(sidecar_of(final), dumps(summary, status)))
    table = cpu(lambda: write_atomic(final + EVENTS, event_table.to_parquet(
        event_table.table_of(final, summary, from_rows(trace.rows)), status.st_size)))
    for name in os.listdir(folder):
        os.remove(os.path.join(folder, name))
    return whole, sidecar, table


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="30,100,300", help="MB of JSON, comma-separated (a copy is 31 MB)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if not event_table.available():
        sys.exit("needs pyarrow: pip install 'lightning_profkit[sql]'")
    work = tempfile.mkdtemp(prefix="profkit-companions-")
    try:
        sizes = {}
        for mb in (float(s) for s in args.sizes.split(",")):
            path = os.path.join(work, f"{mb:g}.json.gz")
            sizes[path] = repeated(SOURCE, mb, path)[0] / 1e6
        runs: dict[str, list[tuple[float, float, float]]] = {p: [] for p in sizes}
        scratch = os.path.join(work, "scratch")
        os.makedirs(scratch)
        for _ in range(args.repeats):  # interleaved
            for path in sizes:
                runs[path].append(one(scratch, path))
        print(f"# {datetime.date.today()}, {os.cpu_count()} CPUs, median of {args.repeats}; CPU s of one process")
        print("| JSON MB | finalizing, all s | sidecar s | sidecar ms per MB | events table s | events table ms per MB "
              "| both, share of the finalizing |")
        print("|---|---|---|---|---|---|---|")
        for path, mb in sizes.items():
            whole, sidecar, table = (statistics.median(r[i] for r in runs[path]) for i in range(3))
            print(f"| {mb:.0f} | {whole:.2f} | {sidecar:.3f} | {1000 * sidecar / mb:.1f} | {table:.2f} | "
                  f"{1000 * table / mb:.1f} | {(sidecar + table) / whole:.0%} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
