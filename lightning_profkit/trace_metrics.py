"""Figures of one profiled window, from its trace events: interval math only, no torch.

Definitions (``../shared/traces/README.md``, "host_step", with two changes): steps are the host-side
``ProfilerStep#N`` spans; device activity is kernels, memcpy and memset on a GPU's streams, and the GPU idle
share is averaged over the GPUs in the trace (a trace of one process driving two GPUs is not "busy" while
one of them idles); blocking calls are counted on the threads that run the steps only (NCCL's watchdog
thread polls ``cudaEventQuery`` all the time under DDP, and that call never blocks: it is not counted).
Times are in µs, the trace unit. A figure that a trace cannot support is absent (no steps: no step
figures; no GPU events: no GPU idle).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from lightning_profkit import intervals
from lightning_profkit.tensorboard_compat import is_dataloader_event
from lightning_profkit.trace_columns import Columns

BLOCKING_SYNC_CALLS = (
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "cudaMemcpyAsync",
    "cudaStreamSynchronize",
)
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset")
RUNTIME_CATS = ("cuda_runtime", "runtime", "cuda_driver")


def spans(c: Columns, mask: np.ndarray) -> intervals.Union:
    return intervals.union(c.ts[mask], c.end[mask])


def window_figures(c: Columns) -> dict[str, Any]:
    """Host-step figures of one trace: data-wait share, GPU idle, blocking sync time, peak memory."""
    peaks: dict[str, dict[str, int]] = {}
    for code, device in enumerate(c.memory_devices):
        at = c.memory_device == code
        allocated, reserved = c.memory_allocated[at], c.memory_reserved[at]
        if ((allocated >= 0) | (reserved >= 0)).any():
            peaks[device] = {"Total Allocated": int(max(allocated.max(), 0)), "Total Reserved": int(max(reserved.max(), 0))}
    device = c.cat_mask(*DEVICE_CATS)
    runtime = c.cat_mask(*RUNTIME_CATS)
    rest = ~device & ~runtime
    gpu_cat = c.cat_mask(*[x for x in c.cats if x.startswith("gpu_")])
    steps = rest & ~gpu_cat & c.name_mask(lambda n: n.startswith("ProfilerStep#"))
    dataloader = rest & ~steps & c.name_mask(is_dataloader_event)
    figures: dict[str, Any] = {"n_host_steps": int(steps.sum()), "peak_memory_bytes": peaks}
    if not steps.any():
        return figures
    step_union = spans(c, steps)
    step_time = float(np.sum(c.end[steps] - c.ts[steps]))
    in_steps = lambda u: intervals.overlap(u, step_union)  # noqa: E731
    figures["host_step_time_us"] = step_time
    figures["dataloader_us_in_steps"] = in_steps(spans(c, dataloader))
    figures["dataloader_frac"] = figures["dataloader_us_in_steps"] / step_time if step_time else 0.0
    on_step_threads = intervals.member(c.thread, c.thread[steps])
    sync = {name: runtime & on_step_threads & c.name_mask(lambda n, name=name: n == name) for name in BLOCKING_SYNC_CALLS}
    figures["blocking_sync_us_by_name"] = {name: in_steps(spans(c, m)) for name, m in sync.items()}
    figures["blocking_sync_calls_us_in_steps"] = in_steps(spans(c, np.logical_or.reduce(list(sync.values()))))
    figures["blocking_sync_frac"] = figures["blocking_sync_calls_us_in_steps"] / step_time if step_time else 0.0
    busy = gpu_busy_fraction(c, device, (float(c.ts[steps].min()), float(c.end[steps].max())))
    if busy is not None:
        figures["gpu_busy_frac_window"] = busy
        figures["gpu_idle_frac_window"] = 1.0 - busy
    return figures


def gpu_busy_fraction(c: Columns, device: np.ndarray, window: tuple[float, float]) -> Optional[float]:
    """Share of ``window`` during which a GPU had activity (events where ``device``), averaged over the GPUs
    (a device event's process id is its GPU); None when the trace has no device events."""
    if not device.any() or window[1] <= window[0]:
        return None
    span = (np.array([window[0]]), np.array([window[1]]))
    codes: dict[Any, int] = {}
    gpu_of_thread = np.array([codes.setdefault(pid, len(codes)) for pid, _ in c.threads], dtype=np.int64)
    gpus = gpu_of_thread[c.thread]
    shares = [intervals.overlap(spans(c, device & (gpus == gpu)), span) for gpu in intervals.distinct(gpus[device])]
    return sum(shares) / len(shares) / (window[1] - window[0])
