"""What profiling cost an epoch, from its step times and the steps its windows held. Pure.

``profiled_step_ratio``: mean time of the steps a profiler session ran in (warm-up, recording, the save at
the window's end) over the mean of the epoch's other steps. ``after_window_ratio``: median time of the
unprofiled steps after the epoch's first window over the median of the unprofiled steps before the fit's
first window (the baseline, kept from the first epoch that had such steps), each less the share of its span
that the training thread waited for a CPU (another process had it): a profiler that leaves something behind
for the rest of the run (on CUDA: CUPTI kept attached, see ``TEARDOWN_CUPTI``) reads above 1 in every epoch
after it; a machine that got busier does not. Medians, so that a checkpoint or a slow logger call on one step
does not move it.
``window_ms``: milliseconds of the training thread in each window's own calls (the profiler's start, its
step boundaries, its stop and the hand-over of the results), the mean over the epoch's windows.
``helper_cpu_s``: CPU seconds used in the epoch off the training thread, by the trace writer's thread and
the finalizing process, read from the OS at the epoch's end; absent where none was used.
"""

from __future__ import annotations

import statistics
from typing import Optional, Sequence

# after_window_ratio above this in two epochs running: warn. On CUDA 1.1, not 1.05: the baseline holds few steps
# (5 with the default window); the CUPTI slowdown it is for is 10-20% (pytorch/pytorch#144455). On CPU 1.5:
# nothing known there outlives a profiler session, and clean runs on a loaded 2-core machine read 0.6-1.5, so only
# a slowdown far above that is news
SLOW_AFTER = {"cuda": 1.1, "cpu": 1.5}
# On CPU, an epoch whose training thread waited for a CPU over this share of its time after the window is not
# counted: there the machine's load moves the figure past the limit (1.6-2.3 seen, the window finished by either
# path, the thread waiting for a CPU most of its time)
BUSY_AFTER = 0.25
SLOW_EPOCHS = 2
SKIP = 5  # an epoch's first steps (worker start-up, allocator growth) are no baseline


def own_cost(step_times: Sequence[float], first_step: int, profiled: Sequence[tuple[int, int]],
             baseline: Optional[float] = None, spent: Sequence[float] = (),
             helper_cpu_s: Optional[float] = None,
             cpu_waits: tuple[Optional[float], Optional[float]] = (None, None)) -> tuple[dict[str, float], Optional[float]]:
    """``overhead/...`` figures of an epoch whose step ``first_step + i`` took ``step_times[i]`` seconds and
    whose windows held the steps of ``profiled`` (inclusive ranges) and spent ``spent`` seconds each in their
    own calls, against ``baseline`` (seconds; default: this epoch's steps before its first window); and this
    epoch's own baseline. Absent without a window; ``helper_cpu_s`` where the epoch used some (None or 0: none).
    ``cpu_waits``: the share of the time before the epoch's first window and after it that the training thread
    waited for a CPU (None: not known), taken out of the steps' times on each side."""
    out: dict[str, float] = {}
    if helper_cpu_s:
        out["overhead/helper_cpu_s"] = helper_cpu_s
    if spent:
        out["overhead/window_ms"] = 1000 * sum(spent) / len(spent)
    if not profiled or not step_times:
        return out, None
    inside = [False] * len(step_times)
    for a, b in profiled:
        for step in range(max(a, first_step), min(b, first_step + len(step_times) - 1) + 1):
            inside[step - first_step] = True
    on = [t for t, p in zip(step_times, inside) if p]
    off = [t for t, p in zip(step_times, inside) if not p]
    if on and off:
        out["overhead/profiled_step_ratio"] = (sum(on) / len(on)) / (sum(off) / len(off))
    start, end = profiled[0][0] - first_step, profiled[0][1] - first_step
    before = [t for i, t in enumerate(step_times[:max(start, 0)]) if i >= SKIP]
    own = statistics.median(before) * (1 - (cpu_waits[0] or 0.0)) if before else None
    after = [t for i, t in enumerate(step_times) if i > end and not inside[i]]
    reference = baseline if baseline is not None else own
    if after and reference:
        out["overhead/after_window_ratio"] = statistics.median(after) * (1 - (cpu_waits[1] or 0.0)) / reference
    return out, own


def slow_epochs(running: int, ratio: Optional[float], limit: float) -> int:
    """Epochs running with ``after_window_ratio`` above ``limit`` (``SLOW_AFTER`` of the device), after one more
    epoch's ``ratio`` (``None``: an epoch without the figure, which leaves the count as it is)."""
    if ratio is None:
        return running
    return running + 1 if ratio > limit else 0
