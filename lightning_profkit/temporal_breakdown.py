"""HolisticTraceAnalysis's temporal breakdown (``get_temporal_breakdown``, HTA 0.5.0 defaults), on plain events.

Window = first to last GPU activity; idle = window - union of all GPU activity; compute = union of kernels
that are not communication (``nccl*Kernel``), memory (``*Memcpy*``, ``Memset*``) or synchronisation
(``*Sync``); non-compute = the rest. As HTA does by default, the last ProfilerStep is left out: only CPU
events that start before it and the GPU work they launched count. Nanosecond timestamps are rounded the way
HTA rounds them (start up, end down). Times in µs.
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterable, Optional

from lightning_profkit.trace_metrics import length, union

_NON_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
_DEVICE_SYNC_NAMES = ("Event Sync", "Context Sync")


def _int_or(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def temporal_breakdown(events: Iterable[dict[str, Any]]) -> Optional[dict[str, float]]:
    """``span_us``, ``idle_us``, ``compute_us``, ``non_compute_us`` and their fractions; None without GPU activity."""
    rows = []
    fractional = False
    for e in events:
        if e.get("dur") is None or e.get("cat") is None or e.get("cat") == "Trace" or e.get("ts") is None:
            continue
        ts, dur = e["ts"], e["dur"]
        fractional = fractional or isinstance(ts, float)
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        rows.append((ts, dur, e.get("name") or "", _int_or(args.get("stream", -1), -1), _int_or(args.get("correlation", -1), -1)))
    if fractional:  # HTA: ts rounded up, end rounded down
        rows = [(math.ceil(ts), math.floor(ts + dur) - math.ceil(ts), n, s, c) for ts, dur, n, s, c in rows]

    def on_gpu(row: tuple) -> bool:
        return (row[3] >= 0 and row[4] >= 0) or row[2] in _DEVICE_SYNC_NAMES

    step_names = {r[2] for r in rows if "ProfilerStep" in r[2]}
    if len(step_names) > 1:
        cpu = [r for r in rows if not on_gpu(r)]
        last_start = max(r[0] for r in cpu if r[2] in step_names)
        cpu = [r for r in cpu if r[0] < last_start]
        launched = {r[4] for r in cpu}
        rows = [r for r in rows if on_gpu(r) and r[4] in launched] + cpu
    gpu = [(ts, ts + dur, name) for ts, dur, name, stream, _ in rows if stream != -1]
    if not gpu:
        return None
    merged = union((s, e) for s, e, _ in gpu)
    span = merged[-1][1] - merged[0][0]
    idle = span - length(merged)
    compute = length(union((s, e) for s, e, name in gpu if not _NON_COMPUTE.match(name)))
    out = {"span_us": span, "idle_us": idle, "compute_us": compute, "non_compute_us": span - idle - compute}
    for key in ("idle", "compute", "non_compute"):
        out[f"{key}_frac"] = out[f"{key}_us"] / span if span else 0.0
    return out
