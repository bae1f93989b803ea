"""Figures of one profiled window, from its trace events: interval math only, no torch.

Definitions (``../shared/traces/README.md``, "host_step"): steps are the host-side ``ProfilerStep#N``
spans; device activity is kernels, memcpy and memset on any GPU stream. Times are in µs, the trace unit.
A figure that a trace cannot support is absent (no steps: no step figures; no GPU events: no GPU idle).
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from lightning_profkit.tensorboard_compat import is_dataloader_event

Interval = tuple[float, float]

BLOCKING_SYNC_CALLS = (
    "cudaDeviceSynchronize",
    "cudaEventQuery",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "cudaMemcpyAsync",
    "cudaStreamSynchronize",
)
_DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
_RUNTIME_CATS = {"cuda_runtime", "runtime", "cuda_driver"}


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Merge overlapping intervals; sorted and disjoint."""
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def length(intervals: Iterable[Interval]) -> float:
    return sum(e - s for s, e in intervals)


def intersect(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """Intersection of two unions (each sorted and disjoint)."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """``a`` minus ``b`` (each sorted and disjoint)."""
    out: list[Interval] = []
    j = 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            if b[k][0] > start:
                out.append((start, b[k][0]))
            start = max(start, b[k][1])
            k += 1
        if start < end:
            out.append((start, end))
    return out


def _span(event: dict[str, Any]) -> Interval:
    start = float(event["ts"])
    return start, start + float(event.get("dur", 0))


def window_figures(events: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Host-step figures of one trace: data-wait share, GPU idle, blocking sync time, peak memory."""
    steps: list[Interval] = []
    dataloader: list[Interval] = []
    device: list[Interval] = []
    sync: dict[str, list[Interval]] = {name: [] for name in BLOCKING_SYNC_CALLS}
    peaks: dict[str, dict[str, int]] = {}
    for e in events:
        ph, name = e.get("ph"), e.get("name") or ""
        if ph == "i" and name == "[memory]":
            args = e.get("args") or {}
            if "Total Allocated" in args or "Total Reserved" in args:
                key = f"{args.get('Device Type')}:{args.get('Device Id')}"
                peak = peaks.setdefault(key, {"Total Allocated": 0, "Total Reserved": 0})
                for field in peak:
                    peak[field] = max(peak[field], int(args.get(field) or 0))
            continue
        if ph != "X":
            continue
        cat = (e.get("cat") or "").lower()
        if cat in _DEVICE_CATS:
            device.append(_span(e))
        elif cat in _RUNTIME_CATS:
            if name in sync:
                sync[name].append(_span(e))
        elif name.startswith("ProfilerStep#") and not cat.startswith("gpu_"):
            steps.append(_span(e))
        elif is_dataloader_event(name):
            dataloader.append(_span(e))

    figures: dict[str, Any] = {"n_host_steps": len(steps), "peak_memory_bytes": peaks}
    if not steps:
        return figures
    step_union = union(steps)
    step_time = sum(e - s for s, e in steps)
    in_steps = lambda spans: length(intersect(union(spans), step_union))  # noqa: E731
    figures["host_step_time_us"] = step_time
    figures["dataloader_us_in_steps"] = in_steps(dataloader)
    figures["dataloader_frac"] = figures["dataloader_us_in_steps"] / step_time if step_time else 0.0
    by_name = {name: in_steps(spans) for name, spans in sync.items()}
    figures["blocking_sync_us_by_name"] = by_name
    figures["blocking_sync_calls_us_in_steps"] = in_steps([s for spans in sync.values() for s in spans])
    figures["blocking_sync_frac"] = figures["blocking_sync_calls_us_in_steps"] / step_time if step_time else 0.0
    busy = gpu_busy_fraction(device, (min(s for s, _ in steps), max(e for _, e in steps)))
    if busy is not None:
        figures["gpu_busy_frac_window"] = busy
        figures["gpu_idle_frac_window"] = 1.0 - busy
    return figures


def gpu_busy_fraction(device: list[Interval], window: Interval) -> Optional[float]:
    """Share of ``window`` with any device activity; None when the trace has no device events."""
    if not device or window[1] <= window[0]:
        return None
    return length(intersect(union(device), [window])) / (window[1] - window[0])
