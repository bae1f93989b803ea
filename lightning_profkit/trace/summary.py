"""Where the time went in one trace, in many, and between two sets: the figures behind ``profkit summary``
(docs/profkit.md)."""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable, Optional

import numpy as np

from lightning_profkit.figures import HostFigures
from lightning_profkit.idle_causes import CAUSES, share_name
from lightning_profkit.printable import name_text, number_in
from lightning_profkit.trace.columns import Columns
from lightning_profkit.trace.file import TraceError
from lightning_profkit.trace.host_steps import window_figures
from lightning_profkit.trace.load import LoadedTrace, gc_paused
from lightning_profkit.trace.operator_times import operator_times, top
from lightning_profkit.trace.sidecar import with_place
from lightning_profkit.trace.step_breakdown import step_breakdown
from lightning_profkit.trace.vocabulary import STEP_PARTS
from lightning_profkit.trace.temporal_breakdown import temporal_breakdown

TOP_N = 10
BESIDE_ROWS = 500_000  # events (about 140 MB of JSON) up to which the operator tables are made on a thread
# and from which: below, a thread's start costs more than it saves (826 events: 2.0 ms with it, 1.2 without; 75,000:
# 25 ms against 37), and a window finished in the training process's writer thread starts none
BESIDE_MIN_ROWS = 10_000
_WORKER_RANK = re.compile(r"_rank([0-9]+)$")
# What the numbers of a summary are in, by key (JSON paths with * for any name): the "units" of
# `profkit summary --json` and `profkit compare --json`, and what the text tables format them by.
UNITS = {
    "*_us, step_breakdown.per_step.*, step_breakdown.avg.*": "microseconds",
    "*_ms": "milliseconds",
    "*_ms_per_step, sync_ms_per_step/*": "milliseconds per step",
    "*_share, *_frac, share/*": "fraction of the steps' time, 0 to 1",
    "host.gpu_idle_by_cause.*, gpu_idle_*_share": "fraction of the steps' time as the GPU ran them, 0 to 1, by what "
                                                  "the training process did while the GPU idled; they sum to "
                                                  "gpu_idle_share",
    "hta/*, temporal.*_frac": "fraction of the time from the first to the last GPU activity (HTA's window), 0 to 1",
    "*_bytes": "bytes",
    "peak_memory_mb/*": "MB (10**6 bytes)",
    "calls": "count, all traces together",
    "step_breakdown.steps": "the number of each step marker (null: the whole trace taken as one step)",
    "host.steps, traces": "count",
    "rank": "the trace's rank: its distributedInfo, else the _rank<N> of its worker name",
    "ranks.per_rank.*_ms_per_step": "milliseconds per step, mean over the rank's traces",
    "ranks.verdict.*_spread": "ratio, slowest / fastest rank",
}


def unit(key: str) -> str:
    """The kind of an aggregate figure: "fraction", "ms", "ms per step" or "MB"."""
    if key.startswith("peak_memory_mb/"):
        return "MB"
    if key.endswith("ms_per_step") or key.startswith("sync_ms_per_step/"):
        return "ms per step"
    if key.endswith("_ms"):
        return "ms"
    return "fraction"  # *_share, share/*, hta/*


def summarize_columns(c: Columns, beside: bool = True) -> dict[str, Any]:
    """The figures of a trace's columns; ``beside``: the operator tables on a second thread where the trace's size
    suits it (False: one thread, the least memory)."""
    # The operator tables on a second thread: numpy lets go of the GIL in its sorts and searches, so on two
    # cores they cost about half their time (a third of the figures' time on 75,000 events). Not on a small trace
    # (BESIDE_MIN_ROWS), nor on a large one, whose memory is mostly these columns and the figures' temporaries.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="profkit-operators") as threads:
        on_thread = beside and BESIDE_MIN_ROWS <= c.ts.size < BESIDE_ROWS
        operators = threads.submit(operator_times, c) if on_thread else None
        steps = step_breakdown(c)
        host = window_figures(c)
        temporal = temporal_breakdown(c)
        ops = operators.result() if operators is not None else operator_times(c)
    notes = []
    if not host.steps:
        whole = "; the step breakdown uses one step over the whole trace" if steps else ""
        notes.append("no ProfilerStep: host-step figures absent" + whole)
    if temporal is None:
        notes.append("no GPU activity: GPU figures absent")
    return {
        "step_breakdown": steps,
        "temporal": temporal,
        "host": host.to_json(),
        "operators": {  # whole, most time first
            "cpu": top(ops["cpu"], "self_us", len(ops["cpu"])),
            "device": top(ops["device"], "total_us", len(ops["device"])),
        },
        "notes": notes,
    }


def summarize_trace(path: str, trace: LoadedTrace, beside: bool = True) -> dict[str, Any]:
    """The summary of a loaded trace, labelled with its window, worker and rank (``beside``: see
    :func:`summarize_columns`)."""
    meta = trace.meta or {}
    worker = meta.get("worker") if isinstance(meta.get("worker"), str) else None
    worker = worker or name_text(os.path.basename(path).split(".")[0])
    out = {**with_place(path), "worker": worker, "rank": rank_of(trace.distributed_info, worker)}
    columns = trace.rows
    damaged = np.flatnonzero((columns.dur < 0) | np.isinf(columns.dur) | ~np.isfinite(columns.ts))
    if damaged.size:  # figures from them would be negative or infinite
        first = damaged[0]
        raise TraceError(f"{path}: a damaged trace: {damaged.size} event(s) with a negative or infinite duration or "
                         f"time (the first: {columns.names[columns.name[first]][:80]!r} at {columns.ts[first]} µs, "
                         f"duration {columns.dur[first]} µs)")
    with gc_paused():  # as many rows as operators: see gc_paused
        out.update(summarize_columns(columns, beside))
    problems = meta.get("problems") if isinstance(meta.get("problems"), list) else []  # any trace may claim some
    shown = [f"incomplete trace: {p}" for p in problems[:10] if isinstance(p, str) and p.isprintable()]
    out["notes"] = shown + out["notes"]
    return out


def rank_of(distributed_info: Optional[dict[str, Any]], worker: str) -> Optional[int]:
    """A trace's rank: from its ``distributedInfo``, else from a worker name ending ``_rank<N>`` (as
    PerformanceMonitor names its workers); None when neither says."""
    rank = (distributed_info or {}).get("rank")
    if isinstance(rank, int) and not isinstance(rank, bool):
        return rank
    if isinstance(rank, str):
        return number_in(rank)
    match = _WORKER_RANK.search(worker)
    return number_in(match.group(1)) if match else None


def key_figures(summary: dict[str, Any]) -> dict[str, Optional[float]]:
    """The comparable numbers of one trace summary, flat; None where the trace cannot tell."""
    out: dict[str, Optional[float]] = {}
    steps = summary.get("step_breakdown")
    avg = steps["avg"] if steps else {}
    out["step_time_ms"] = avg["Total"] / 1000 if avg else None
    for role in STEP_PARTS:
        out[f"share/{role}"] = avg[role] / avg["Total"] if avg and avg["Total"] else None
    host = HostFigures.from_json(summary.get("host") or {}).per_step()
    for key in ("host_step_ms", "data_wait_share", "gpu_idle_share", *map(share_name, CAUSES),
                "blocking_sync_ms_per_step"):
        out[key] = host.pop(key, None)
    out.update((k, v) for k, v in host.items() if k.startswith("sync_ms_per_step/"))
    temporal = summary.get("temporal") or {}
    for key in ("idle", "compute", "non_compute"):
        out[f"hta/{key}"] = temporal.get(f"{key}_frac")
    out.update((k, v) for k, v in host.items() if k.startswith("peak_memory_mb/"))
    return out


def aggregate(summaries: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Means over traces of each key figure (traces lacking it left out), and the operator tables summed."""
    summaries = list(summaries)
    keyed = [key_figures(s) for s in summaries]
    figures = {k: [f[k] for f in keyed if f.get(k) is not None] for k in dict.fromkeys(k for f in keyed for k in f)}
    ops: dict[str, dict[str, dict[str, float]]] = {"cpu": {}, "device": {}}
    for s in summaries:
        for table, rows in s["operators"].items():
            for row in rows:
                acc = ops[table].setdefault(row["name"], {k: 0 for k in row if k != "name"})
                for k in acc:
                    acc[k] += row[k]
    return {
        "traces": len(summaries),
        "figures": {k: (sum(v) / len(v) if v else None) for k, v in figures.items()},
        "operators": {"cpu_by_self": top(ops["cpu"], "self_us", TOP_N),
                      "cpu_by_total": top(ops["cpu"], "total_us", TOP_N),
                      "device_by_total": top(ops["device"], "total_us", TOP_N)},
    }


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two aggregates side by side: each figure's A, B and B - A."""
    rows = {}
    for key in dict.fromkeys([*a["figures"], *b["figures"]]):  # a's, then b's others
        va, vb = a["figures"].get(key), b["figures"].get(key)
        rows[key] = {"a": va, "b": vb, "diff": (vb - va) if va is not None and vb is not None else None}
    cpu_a = {r["name"]: r["self_us"] for r in a["operators"]["cpu_by_self"]}
    cpu_b = {r["name"]: r["self_us"] for r in b["operators"]["cpu_by_self"]}
    names = sorted(set(cpu_a) | set(cpu_b), key=lambda n: -max(cpu_a.get(n, 0), cpu_b.get(n, 0)))[:TOP_N]
    per_trace = lambda agg, us: us / agg["traces"] if us is not None and agg["traces"] else None  # noqa: E731
    ops = [
        {"name": n, "a_self_us": per_trace(a, cpu_a.get(n)), "b_self_us": per_trace(b, cpu_b.get(n))} for n in names
    ]
    return {"traces": {"a": a["traces"], "b": b["traces"]}, "figures": rows, "cpu_by_self_per_trace": ops}

