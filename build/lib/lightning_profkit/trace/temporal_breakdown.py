"""HolisticTraceAnalysis's temporal breakdown (``get_temporal_breakdown``, HTA 0.5.0 defaults), on columns.

Window = first to last GPU activity; idle = window - union of all GPU activity; compute = union of kernels
that are not communication (``nccl*Kernel``), memory (``*Memcpy*``, ``Memset*``) or synchronisation
(``*Sync``); non-compute = the rest. As HTA does by default, the last ProfilerStep is left out: only CPU
events that start before it and the GPU work they launched count. Float timestamps are rounded the way
HTA rounds them (start up, end down). Times in µs.
"""

from __future__ import annotations

import re
from typing import Optional

import numpy as np

from lightning_profkit.trace import intervals, vocabulary as v
from lightning_profkit.trace.columns import Columns, code_mask

_NON_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
_DEVICE_SYNC_NAMES = ("Event Sync", "Context Sync")


def temporal_breakdown(c: Columns) -> Optional[dict[str, float]]:
    """``span_us``, ``idle_us``, ``compute_us``, ``non_compute_us`` and their fractions; None without GPU activity."""
    valid_cats = [i for i, raw in enumerate(c.raw_cats) if raw is not None and raw != v.NO_CATEGORY]
    rows = ~np.isnan(c.dur) & code_mask(c.cat, valid_cats, len(c.cats))
    ts, dur, name, stream, corr = c.ts[rows], c.dur[rows], c.name[rows], c.stream[rows], c.corr[rows]
    if c.fractional:
        start, end = np.ceil(ts), np.floor(ts + dur)
    else:
        start, end = ts, ts + dur
    sync = [i for i, n in enumerate(c.names) if n in _DEVICE_SYNC_NAMES]
    gpu = ((stream >= 0) & (corr >= 0)) | code_mask(name, sync, len(c.names))
    steps = [i for i, n in enumerate(c.names) if v.is_step(n)]
    keep = np.ones(ts.shape, dtype=bool)
    if len(steps) > 1:
        cpu_steps = ~gpu & code_mask(name, steps, len(c.names))
        last_start = start[cpu_steps].max() if cpu_steps.any() else -np.inf
        cpu = ~gpu & (start < last_start)
        keep = cpu | (gpu & intervals.member(corr, corr[cpu]))
    sel = keep & (stream != -1)
    if not sel.any():
        return None
    merged = intervals.union(start[sel], end[sel])
    span = float(merged[1][-1] - merged[0][0])
    idle = span - intervals.length(merged)
    compute_names = [i for i, n in enumerate(c.names) if not _NON_COMPUTE.match(n)]
    comp = sel & code_mask(name, compute_names, len(c.names))
    compute = intervals.length(intervals.union(start[comp], end[comp]))
    out = {"span_us": span, "idle_us": idle, "compute_us": compute, "non_compute_us": span - idle - compute}
    for key in ("idle", "compute", "non_compute"):
        out[f"{key}_frac"] = out[f"{key}_us"] / span if span else 0.0
    return out
