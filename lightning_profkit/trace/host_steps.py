"""Figures of one profiled window from its trace's columns, in µs; one a trace cannot support is None. Definitions:
docs/metrics.md. Design notes: docs/how-it-works.md."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from lightning_profkit.figures import HostFigures, MemoryPeak
from lightning_profkit.idle_causes import CAUSES
from lightning_profkit.trace import intervals, vocabulary as v
from lightning_profkit.trace.columns import Columns
from lightning_profkit.trace.step_breakdown import on_device


def window_figures(c: Columns) -> HostFigures:
    """Host-step figures of one trace: data-wait share, GPU idle, blocking sync time, peak memory."""
    peaks = memory_peaks(c)
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
    sync = {name: runtime & on_step_threads & c.named(name) for name in v.BLOCKING_SYNC_CALLS}
    any_sync = np.logical_or.reduce(list(sync.values()))
    data_wait = in_steps(c.spans(dataloader))
    blocking = in_steps(c.spans(any_sync))
    # what else the training process ran: on any of its threads (backward runs on autograd's), the steps left out
    pids = {c.threads[t][0] for t in intervals.distinct(c.thread[steps]).tolist()}
    in_processes = np.array([pid in pids for pid, _ in c.threads], dtype=bool)[c.thread]
    operators = c.cat_mask(*v.OPERATOR, v.USER_ANNOTATION, *v.PYTHON, *v.HOST_CUDA) & ~steps & in_processes
    causes = [(CAUSES[0], dataloader), (CAUSES[1], any_sync), (CAUSES[2], operators)]
    idle, by_cause = gpu_idle(c, device, gpu_steps(c, steps, runtime), causes)
    calls = runtime.any()  # a trace without CUDA (or HIP) calls cannot tell blocking time: absent, not zero
    return HostFigures(
        steps=int(steps.sum()), step_time_us=step_time, data_wait_us=data_wait, data_wait_share=share(data_wait),
        blocking_sync_us=blocking if calls else None, blocking_sync_share=share(blocking) if calls else None,
        blocking_sync_us_by_call={name: in_steps(c.spans(m)) for name, m in sync.items()} if calls else {},
        gpu_busy_share=None if idle is None else 1.0 - idle, gpu_idle_share=idle, gpu_idle_by_cause=by_cause,
        peak_memory=peaks,
    )


OTHER = CAUSES[-1]  # idle time in no event of another cause
MEMORY_DEVICES = 64  # devices whose peak memory is told, those with the most allocated (a process sees a few)


def memory_peaks(c: Columns) -> dict[str, MemoryPeak]:
    """The most memory allocated and reserved on each device of the ``[memory]`` events (one pass for all), for the
    :data:`MEMORY_DEVICES` devices with the most."""
    allocated = np.full(len(c.memory_devices), -1, dtype=np.int64)
    reserved = allocated.copy()
    np.maximum.at(allocated, c.memory_device, c.memory_allocated)
    np.maximum.at(reserved, c.memory_device, c.memory_reserved)
    told = np.flatnonzero((allocated >= 0) | (reserved >= 0))
    told = np.sort(told[np.argsort(-allocated[told], kind="stable")[:MEMORY_DEVICES]])
    return {c.memory_devices[i]: MemoryPeak(max(int(allocated[i]), 0), max(int(reserved[i]), 0)) for i in told.tolist()}


def gpu_steps(c: Columns, steps: np.ndarray, launches: np.ndarray) -> intervals.Union:
    """The steps as the GPU ran them (:func:`~lightning_profkit.trace.step_breakdown.on_device`, linking by
    every host call into CUDA: the driver launches compiled kernels). A GPU-bound model's host runs steps ahead
    of its GPU (on an H200, 63-82 ms ahead in 32 ms steps): the host steps' own span would count as idle the
    GPU's work on steps launched before the window."""
    at = np.flatnonzero(steps)
    at = at[np.argsort(c.ts[at], kind="stable")]
    spans = on_device(c, list(zip(c.ts[at].tolist(), c.end[at].tolist())), launches)
    return intervals.union(*np.reshape(spans, (-1, 2)).T)


def gpu_idle(c: Columns, device: np.ndarray, steps: intervals.Union,
             causes: list[tuple[str, np.ndarray]]) -> tuple[Optional[float], dict[str, float]]:
    """The share of ``steps`` during which the GPUs had no activity (events where ``device``; a device event's
    process id is its GPU), averaged over the GPUs, and that share by cause: each moment of the steps goes to the
    first of ``causes`` (a name, and where the host events of that cause are) that covers it, else to ``other``.
    None and no causes when the trace has no device events. Sorts and searches, whatever the GPUs and events."""
    total = intervals.length(steps)
    if not device.any() or total <= 0:
        return None, {}
    codes: dict[Any, int] = {}
    gpu_of_thread = np.array([codes.setdefault(pid, len(codes)) for pid, _ in c.threads], dtype=np.int64)
    active = np.flatnonzero(device)
    starts, ends, gpus = intervals.union_by(gpu_of_thread[c.thread[active]], c.ts[active], c.end[active])
    count = intervals.distinct(gpus).size

    def busy(u: intervals.Union) -> float:  # device time inside ``u``, summed over the GPUs
        return float((intervals.covered_until(u, ends) - intervals.covered_until(u, starts)).sum())

    idle = 1.0 - busy(steps) / count / total
    # left: the segments between all bounds that lie in a step, not yet given
    bounds, covers, left = intervals.segments(steps, [c.spans(where) for _, where in causes])
    parts = {}
    for (name, _), cover in zip(causes, covers):
        parts[name] = cover & left
        left &= ~parts[name]
    parts[OTHER] = left
    by_cause = {}
    for name, taken in parts.items():
        part = intervals.union(bounds[:-1][taken], bounds[1:][taken])
        by_cause[name] = (intervals.length(part) - busy(part) / count) / total
    return idle, by_cause
