"""`profkit summary --json` on large traces: time and peak memory against the size of the JSON, HTA beside it.

The traces are made by repeating a real A100 trace (``control.json.gz``) in time: each copy is shifted by the
trace's span, its ``ProfilerStep#N`` renumbered after the copy before, and its flow, correlation and external
ids offset, so that the result is one valid trace of many steps. Written gzipped, as the callback writes them.
Each tool runs as a fresh process of the installed console script (see ``summary_speed.py``); beside the
figures, the time to inflate the file alone (ISA-L, in this process), the floor of any reader of it here, and
what one core does of the reader's work (:func:`one_core_s`): inflating and cutting the text into pieces (the
command's own process), and decoding the pieces into rows (a worker's; the per-piece single-core limit).

    python benchmarks/large_traces.py [--sizes 30,300,1000] [--hta-up-to 300] [--repeats 1]
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
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from summary_speed import HTA, TRACES, installed_copy, run  # noqa: E402

from lightning_profkit.companions import EVENTS, SIDECAR  # noqa: E402

SOURCE = os.path.join(TRACES, "hta", "trace_diff_control", "control.json.gz")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
ID_ARGS = ("correlation", "External id", "Profiler Event Index")
COMPANIONS = (SIDECAR, EVENTS)  # written beside a trace that is parsed: the next look would read them


def repeated(source: str, json_mb: float, out: str) -> tuple[int, int]:
    """Write ``out`` (gzip) with as many copies of ``source`` as make about ``json_mb`` MB of JSON; returns the
    JSON bytes and the copies."""
    with gzip.open(source, "rb") as f:
        doc = json.load(f)
    events = doc.pop("traceEvents")
    spans = [(e["ts"], e["ts"] + e.get("dur", 0)) for e in events if isinstance(e.get("ts"), (int, float))]
    period = max(end for _, end in spans) - min(start for start, _ in spans) + 1000
    steps = [int(m.group(1)) for e in events if (m := _STEP.match(e.get("name", "")))]
    step_count = max(steps) - min(steps) + 1
    ids = [e["id"] for e in events if "id" in e] + [e["args"][k] for e in events for k in ID_ARGS if k in (e.get("args") or {})]
    id_span = max(i for i in ids if isinstance(i, int)) + 1
    one = len(json.dumps(events))
    copies = max(1, round(json_mb * 1e6 / one))
    written = 0
    with open(out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1) as f:
        head = json.dumps(doc)[:-1] + (', ' if doc else '') + '"traceEvents": ['
        f.write(head.encode())
        written += len(head)
        for k in range(copies):
            chunk = json.dumps([_shifted(e, k, period, step_count, id_span) for e in events])[1:-1]
            if k:
                chunk = ", " + chunk
            f.write(chunk.encode())
            written += len(chunk)
        f.write(b"]}")
    return written + 2, copies


def _shifted(event: dict, k: int, period: float, steps: int, ids: int) -> dict:
    if not k:
        return event
    e = dict(event)
    if e.get("ph") == "M":  # process and thread names: once is enough, the copies share them
        return e
    if isinstance(e.get("ts"), (int, float)):
        e["ts"] = e["ts"] + k * period
    m = _STEP.match(e.get("name", ""))
    if m:
        e["name"] = f"ProfilerStep#{int(m.group(1)) + k * steps}"
    if isinstance(e.get("id"), int):
        e["id"] += k * ids
    args = e.get("args")
    if args:
        args = dict(args)
        for key in ID_ARGS:
            if isinstance(args.get(key), int) and args[key] >= 0:
                args[key] += k * ids
        e["args"] = args
    return e


def inflate_s(path: str) -> float:
    """Seconds to read and inflate the file alone (best of 3)."""
    from isal.isal_zlib import decompress

    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        with open(path, "rb") as f:
            decompress(f.read(), 31)
        best = min(best, time.perf_counter() - start)
    return best


def one_core_s(path: str) -> tuple[float, float]:
    """Seconds one core spends, in this process, inflating and cutting the file into the reader's pieces, and
    decoding those pieces into rows as a worker does (each piece timed alone): the limits of the command's own
    process and of one decoding worker."""
    from lightning_profkit.trace.file import json_blocks
    from lightning_profkit.trace.load import PIECE, decode_piece, framed_piece, pieces

    decode = 0.0
    start = time.perf_counter()
    for text, a, b, first, last in pieces((block for block, _ in json_blocks(path, PIECE)), PIECE):
        framed = framed_piece(text, a, b, first, last)
        t0 = time.perf_counter()
        decode_piece(framed)
        decode += time.perf_counter() - t0
    return time.perf_counter() - start - decode, decode


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="30,300,1000", help="MB of JSON, comma-separated")
    parser.add_argument("--hta-up-to", type=float, default=300, help="run HTA on traces up to this many MB")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="profkit-large-")
    try:
        bin_dir = installed_copy(os.path.join(work, "installed"))
        profkit, python = os.path.join(bin_dir, "profkit"), os.path.join(bin_dir, "python")
        rows = []
        for mb in (float(s) for s in args.sizes.split(",")):
            folder = os.path.join(work, f"{mb:g}MB")
            os.makedirs(folder)
            path = os.path.join(folder, "repeated.pt.trace.json.gz")
            json_bytes, copies = repeated(SOURCE, mb, path)
            tools = {"profkit": [profkit, "summary", "--json", path]}
            if mb <= args.hta_up_to:
                tools["hta"] = [python, "-c", HTA, folder]
            def parsed(cmd: list[str], sample: bool = False) -> tuple[float, float]:
                """``run(cmd)`` with no summary beside the trace: the trace itself is read (a first look)."""
                for name in os.listdir(folder):
                    if name.endswith(COMPANIONS):
                        os.remove(os.path.join(folder, name))
                return run(cmd, sample)

            parsed(tools["profkit"])  # warm-up: byte code, the file in the page cache
            timed = {t: [parsed(cmd)[0] for _ in range(args.repeats)] for t, cmd in tools.items()}
            peak = {t: [parsed(cmd, sample=True)[1] for _ in range(args.repeats)] for t, cmd in tools.items()}
            med = {t: (statistics.median(timed[t]), statistics.median(peak[t])) for t in tools}
            rows.append((json_bytes, copies, os.path.getsize(path), inflate_s(path), one_core_s(path), med))
            print(f"{json_bytes / 1e6:.0f} MB done", file=sys.stderr)
            shutil.rmtree(folder)
        print(f"# {datetime.date.today()}, {os.cpu_count()} CPUs, median of {args.repeats}; control.json.gz repeated "
              "in time; peak MB counts worker processes too")
        print("| JSON MB | copies | gz MB | inflate alone s | inflate and cut, one core s | decode pieces, one core s "
              "(MB/s) | profkit s | profkit MB/s | profkit peak MB | peak / JSON | HTA s | HTA peak MB |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for json_bytes, copies, gz, inflate, (cut, decode), med in rows:
            (ps, pm) = med["profkit"]
            hta = med.get("hta")
            mb = json_bytes / 1e6
            print(f"| {mb:.0f} | {copies} | {gz / 1e6:.0f} | {inflate:.2f} | {cut:.2f} | {decode:.2f} ({mb / decode:.0f}) | "
                  f"{ps:.2f} | {mb / ps:.0f} | {pm:.0f} | {pm * 2**20 / json_bytes:.2f}x | "
                  f"{f'{hta[0]:.1f}' if hta else '-'} | {f'{hta[1]:.0f}' if hta else '-'} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
