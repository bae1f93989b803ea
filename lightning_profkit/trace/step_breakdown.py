"""torch-tb-profiler's Overview "step time breakdown", with the two fixes kineto made after its last release
(docs/profkit.md). Design notes: docs/how-it-works.md."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from lightning_profkit.trace import intervals, vocabulary as v
from lightning_profkit.trace.columns import Columns, launcher

_COMM_OPS = {f"{lib}:{op}" for lib in ("nccl", "gloo")
             for op in ("broadcast", "reduce", "all_reduce", "all_gather", "reduce_scatter")}


def step_breakdown(c: Columns) -> Optional[dict[str, Any]]:
    """``{"steps": [step numbers], "per_step": [{column: µs}], "avg": {column: µs}, "dataloader_frac": float}``;
    None for a trace without steps and without host operators."""
    op, annotation, python = c.cat_mask(*v.OPERATOR), c.cat_mask(*v.ANNOTATION), c.cat_mask(*v.PYTHON)
    kernel, memcpy, memset, runtime_calls = (c.cat_mask(*cats) for cats in (v.KERNEL, v.MEMCPY, v.MEMSET, v.RUNTIME))
    step = (op | annotation) & c.name_mask(v.is_step)
    host = (op | annotation | python) & ~step
    comm = host & c.named(*_COMM_OPS)
    dataloader = host & ~python & c.name_mask(v.is_dataloader_event)
    comm_kernels = kernel & intervals.member(c.ext, c.ext[comm])
    roles = {
        "Kernel": kernel & ~comm_kernels, "Memcpy": memcpy, "Memset": memset, "Communication": comm | comm_kernels,
        "Runtime": runtime_calls, "DataLoader": dataloader, "CpuOp": host & ~comm & ~dataloader,
    }
    order = np.flatnonzero(step)
    steps = list(zip(c.ts[order].tolist(), c.end[order].tolist()))
    names = [v.step_number(c.names[i]) for i in c.name[order]]
    if not steps:
        cpu = op | python
        if not cpu.any():
            return None
        steps, names = [(float(c.ts[cpu].min()), float(c.end[cpu].max()))], [None]  # the whole trace
    steps = on_device(c, steps, runtime_calls)
    return _aggregate(steps, names[:len(steps)], {r: c.spans(m) for r, m in roles.items()})


def on_device(c: Columns, steps: list[tuple[float, float]], launches: np.ndarray) -> list[tuple[float, float]]:
    """``steps`` (host spans, in time order) as the GPU ran them, linked by the host calls where ``launches``, as
    torch-tb-profiler's ``StepParser`` moves them (docs/how-it-works.md), the trailing ones it drops left out;
    unchanged when no GPU work can be linked."""
    device = np.flatnonzero(c.cat_mask(*v.DEVICE))
    linked, step_of = _linked(c, steps, np.flatnonzero(launches), device)
    if not linked.size:
        return steps
    last = np.full(len(steps), -np.inf)  # where a step launched no GPU work: it ends as on the host
    np.maximum.at(last, step_of, c.end[device][linked])
    prev_end = steps[0][0]
    first = c.ts[device[linked[step_of == 0]]]  # the GPU work the first step launched
    if first.size:  # GPU work no step launched, ending before the first step's: the first starts after it
        unmatched = np.ones(device.size, dtype=bool)
        unmatched[linked] = False
        ends = c.end[device][unmatched]
        prev_end = float(ends[ends < first.min()].max(initial=prev_end))
    moved = []
    for (start, end), dev_hi in zip(steps, last.tolist()):
        start = max(prev_end, start)
        prev_end = max(end, dev_hi, start)
        moved.append((start, prev_end))
    return moved[:_kept(np.bincount(step_of, minlength=len(steps)))]


def _linked(c: Columns, steps: list[tuple[float, float]], runtime: np.ndarray,
            device: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The GPU work (indices into ``device``) launched by the host calls ``runtime`` that lie inside a step,
    and that step's index for each (see :func:`~lightning_profkit.trace.columns.launcher`)."""
    n = len(steps)
    s0, s1 = np.reshape(steps, (-1, 2)).T
    rt_start, rt_end = c.ts[runtime], c.end[runtime]
    k = np.searchsorted(s1, rt_start, side="right")  # the step the two-pointer walk compares it with
    kk = np.minimum(k, n - 1)
    inside = (k < n) & (s0[kk] <= rt_start) & (rt_end <= s1[kk])
    by = launcher(c, device, runtime)
    linked = np.flatnonzero(by >= 0)
    linked = linked[inside[by[linked]]]
    return linked, k[by[linked]]


def _kept(launched: np.ndarray) -> int:
    """How many steps to keep, given the GPU work each launched: through the last step that launched any, less
    that one where it launched under 80% of the step before it (cut short by the trace's end)."""
    with_device = np.flatnonzero(launched > 0)
    if launched.size < 2 or not with_device.size:
        return launched.size
    last = int(with_device[-1])
    return last if last > 0 and launched[last - 1] * 0.8 > launched[last] else last + 1


def _aggregate(steps: list[tuple[float, float]], names: list[Optional[int]],
               roles: dict[str, intervals.Union]) -> dict[str, Any]:
    """Hand out step time by role priority (``OverallParser``), per step, on the segments between all
    span boundaries."""
    step_starts, step_ends = np.reshape(steps, (-1, 2)).T
    # the steps may overlap: covered counts them all the same
    bounds, covers, in_steps = intervals.segments((step_starts, step_ends), [roles[r] for r in v.STEP_ROLES])
    width = np.diff(bounds)
    taken: dict[str, np.ndarray] = {}
    slot = np.zeros(width.shape, dtype=bool)
    for role, covered in zip(v.STEP_ROLES, covers):
        if slot.any():
            taken[role] = slot & covered
            slot = slot & ~covered
        else:  # as in torch-tb-profiler: the first role, or any role once nothing is left, takes all it covers
            taken[role] = covered
            slot = in_steps & ~covered
    taken["Other"] = slot
    first = np.searchsorted(bounds, step_starts)
    last = np.searchsorted(bounds, step_ends)
    sums = {}
    for role, mask in taken.items():
        cum = np.concatenate([[0.0], np.cumsum(np.where(mask, width, 0.0))])
        sums[role] = cum[last] - cum[first]
    per_step = [{**{role: float(sums[role][k]) for role in taken}, "Total": end - start}
                for k, (start, end) in enumerate(steps)]
    avg = {c: sum(r[c] for r in per_step) / len(per_step) for c in v.STEP_COLUMNS}
    total = sum(r["Total"] for r in per_step)
    return {
        "steps": names,
        "per_step": per_step,
        "avg": avg,
        "dataloader_frac": sum(r["DataLoader"] for r in per_step) / total if total else 0.0,
    }
