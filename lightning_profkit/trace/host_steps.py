"""Figures of one profiled window, from its trace events: interval math only, no torch.

Definitions (the figures under "host_step" in ``tests/data/traces/reference.json``, with three changes): steps are
the host-side ``ProfilerStep#N`` spans; device activity is kernels, memcpy and memset on a GPU's streams; the GPU
idle share is taken over the steps as the GPU ran them (:func:`gpu_steps`) and averaged over the GPUs in the
trace (a trace of one process driving two GPUs is not "busy" while one of them idles); blocking calls are
counted on the threads that run the steps only (NCCL's watchdog thread polls ``cudaEventQuery`` all the time
under DDP, and that call never blocks: it is not counted). Times are in µs, the trace unit. A figure that a
trace cannot support is None (no steps: no step figures; no GPU events: no GPU idle; no CUDA calls: no blocking
time).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from lightning_profkit.figures import HostFigures, MemoryPeak
from lightning_profkit.trace import intervals, vocabulary as v
from lightning_profkit.trace.columns import Columns
from lightning_profkit.trace.step_breakdown import on_device


def window_figures(c: Columns) -> HostFigures:
    """Host-step figures of one trace: data-wait share, GPU idle, blocking sync time, peak memory."""
    peaks: dict[str, MemoryPeak] = {}
    for code, device in enumerate(c.memory_devices):
        at = c.memory_device == code
        allocated, reserved = c.memory_allocated[at], c.memory_reserved[at]
        if ((allocated >= 0) | (reserved >= 0)).any():
            peaks[device] = MemoryPeak(int(max(allocated.max(), 0)), int(max(reserved.max(), 0)))
    device = c.cat_mask(*v.DEVICE)
    runtime = c.cat_mask(*v.HOST_CUDA)
    rest = ~device & ~runtime
    gpu_cat = c.cat_mask(*[x for x in c.cats if x.startswith(v.GPU_PREFIX)])
    steps = rest & ~gpu_cat & c.name_mask(v.is_step)
    dataloader = rest & ~steps & c.name_mask(v.is_dataloader_event)
    if not steps.any():
        return HostFigures(peak_memory=peaks)
    step_union = c.spans(steps)
    step_time = float(np.sum(c.end[steps] - c.ts[steps]))
    in_steps = lambda u: intervals.overlap(u, step_union)  # noqa: E731
    share = lambda us: us / step_time if step_time else 0.0  # noqa: E731
    on_step_threads = intervals.member(c.thread, c.thread[steps])
    sync = {name: runtime & on_step_threads & c.name_mask(lambda n, name=name: n == name) for name in v.BLOCKING_SYNC_CALLS}
    data_wait = in_steps(c.spans(dataloader))
    blocking = in_steps(c.spans(np.logical_or.reduce(list(sync.values()))))
    busy = gpu_busy_fraction(c, device, gpu_steps(c, steps, runtime))
    calls = runtime.any()  # a trace without CUDA (or HIP) calls cannot tell blocking time: absent, not zero
    return HostFigures(
        steps=int(steps.sum()), step_time_us=step_time, data_wait_us=data_wait, data_wait_share=share(data_wait),
        blocking_sync_us=blocking if calls else None, blocking_sync_share=share(blocking) if calls else None,
        blocking_sync_us_by_call={name: in_steps(c.spans(m)) for name, m in sync.items()} if calls else {},
        gpu_busy_share=busy, gpu_idle_share=None if busy is None else 1.0 - busy, peak_memory=peaks,
    )


def gpu_steps(c: Columns, steps: np.ndarray, launches: np.ndarray) -> intervals.Union:
    """The steps as the GPU ran them (:func:`~lightning_profkit.trace.step_breakdown.on_device`, linking by
    every host call into CUDA: the driver launches compiled kernels). A GPU-bound model's host runs steps ahead
    of its GPU (on an H200, 63-82 ms ahead in 32 ms steps): the host steps' own span would count as idle the
    GPU's work on steps launched before the window."""
    at = np.flatnonzero(steps)
    at = at[np.argsort(c.ts[at], kind="stable")]
    spans, _ = on_device(c, list(zip(c.ts[at].tolist(), c.end[at].tolist())), [None] * at.size, launches)
    return intervals.union([a for a, _ in spans], [b for _, b in spans])


def gpu_busy_fraction(c: Columns, device: np.ndarray, steps: intervals.Union) -> Optional[float]:
    """Share of ``steps`` during which a GPU had activity (events where ``device``), averaged over the GPUs
    (a device event's process id is its GPU); None when the trace has no device events."""
    total = intervals.length(steps)
    if not device.any() or total <= 0:
        return None
    codes: dict[Any, int] = {}
    gpu_of_thread = np.array([codes.setdefault(pid, len(codes)) for pid, _ in c.threads], dtype=np.int64)
    gpus = gpu_of_thread[c.thread]
    shares = [intervals.overlap(c.spans(device & (gpus == gpu)), steps) for gpu in intervals.distinct(gpus[device])]
    return sum(shares) / len(shares) / total
