"""HolisticTraceAnalysis's temporal breakdown (``get_temporal_breakdown``, HTA 0.5.0 defaults). Design notes:
docs/how-it-works.md."""

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
    # masks over all rows rather than copies of the valid ones: a large trace's columns are most of memory
    rows = ~np.isnan(c.dur) & code_mask(c.cat, valid_cats, len(c.cats))
    start, end = (np.ceil(c.ts), np.floor(c.end)) if c.fractional else (c.ts, c.end)
    gpu = ((c.stream >= 0) & (c.corr >= 0)) | c.named(*_DEVICE_SYNC_NAMES)
    sel = rows & (c.stream != -1)
    if sum(map(v.is_step, c.names)) > 1:  # more than one step's name
        cpu_steps = rows & ~gpu & c.name_mask(v.is_step)
        last_start = start[cpu_steps].max(initial=-np.inf)
        cpu = rows & ~gpu & (start < last_start)
        sel &= cpu | (gpu & intervals.member(c.corr, c.corr[cpu]))
    if not sel.any():
        return None
    merged = intervals.union_where(start, end, sel)
    span = float(merged[1][-1] - merged[0][0])
    idle = span - intervals.length(merged)
    comp = sel & ~c.name_mask(_NON_COMPUTE.match)
    compute = intervals.length(intervals.union_where(start, end, comp))
    out = {"span_us": span, "idle_us": idle, "compute_us": compute, "non_compute_us": span - idle - compute}
    for key in ("idle", "compute", "non_compute"):
        out[f"{key}_frac"] = out[f"{key}_us"] / span if span else 0.0
    return out
