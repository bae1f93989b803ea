"""What profiling cost an epoch, from its step times and the steps its windows held. Pure.

Its figures (``profiled_step_ratio``, ``after_window_ratio``, ``window_ms``, ``helper_cpu_s``) are the Metrics page's
``overhead/`` rows, docs/metrics.md. Design notes: docs/how-it-works.md."""

from __future__ import annotations

import statistics
from typing import Optional, Sequence

# after_window_ratio above this in two epochs running: warn. On CUDA 1.1, not 1.05: the baseline holds few steps
# (5 with the default window); the CUPTI slowdown it is for is 10-20% (pytorch/pytorch#144455). On CPU 1.5:
# nothing known there outlives a profiler session, and clean runs on a loaded 2-core machine read 0.6-1.5, so only
# a slowdown far above that is news
SLOW_AFTER = {"cuda": 1.1, "cpu": 1.5}
# On CPU, an epoch whose training thread waited for a CPU over this share of its time after the window is not
# counted: there the machine's load moves the figure past the limit (1.6-3.0 seen, the window finished by either
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
    last = first_step + len(step_times) - 1
    inside = {step - first_step for a, b in profiled for step in range(max(a, first_step), min(b, last) + 1)}
    on = [t for i, t in enumerate(step_times) if i in inside]
    off = [t for i, t in enumerate(step_times) if i not in inside]
    if on and off:
        out["overhead/profiled_step_ratio"] = (sum(on) / len(on)) / (sum(off) / len(off))
    start, end = profiled[0][0] - first_step, profiled[0][1] - first_step
    before = [t for i, t in enumerate(step_times[:max(start, 0)]) if i >= SKIP]
    own = statistics.median(before) * (1 - (cpu_waits[0] or 0.0)) if before else None
    after = [t for i, t in enumerate(step_times) if i > end and i not in inside]
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
