"""torch-tb-profiler's Overview "step time breakdown", with the two fixes kineto made after its last release.

Per step: Kernel, Memcpy, Memset, Communication, Runtime, DataLoader, CpuOp ("CPU Exec"), Other, Total (µs).
Steps are the ``ProfilerStep#N`` spans, moved to the device side when kernels can be linked to launches inside
them (a step starts when the previous one's GPU work ended and ends when its own GPU work ends; trailing steps
without GPU work are dropped). Each role's intervals are merged and time inside the steps is handed out in
priority order Kernel > Memcpy > Memset > Communication > Runtime > DataLoader > CpuOp; the rest is Other.
The fixes: ``user_annotation`` events are kept (DataLoader and CPU time recorded under that category count)
and ``cuda_runtime`` events are Runtime (torch-tb-profiler 0.4.3 reports 0 for both on current traces).
"""

from __future__ import annotations

import sys
from typing import Any, Iterable, Optional

from lightning_profkit.trace_metrics import Interval, intersect, length, subtract, union

ROLES = ("Kernel", "Memcpy", "Memset", "Communication", "Runtime", "DataLoader", "CpuOp")
COLUMNS = ROLES + ("Other", "Total")
_COMM_OPS = {f"{lib}:{op}" for lib in ("nccl", "gloo") for op in ("broadcast", "reduce", "all_reduce", "all_gather", "reduce_scatter")}
_KIND = {
    "cpu_op": "op", "operator": "op", "user_annotation": "annotation", "gpu_user_annotation": "annotation",
    "python": "python", "runtime": "runtime", "cuda_runtime": "runtime",
    "kernel": "kernel", "memcpy": "memcpy", "gpu_memcpy": "memcpy", "memset": "memset", "gpu_memset": "memset",
}


def _external_id(args: dict[str, Any]) -> Any:
    value = args.get("external id")
    return args.get("External id") if value is None else value


def _is_dataloader(name: str) -> bool:
    return name.startswith("enumerate(DataLoader)#") and name.endswith(".__next__") or name.startswith("enumerate(DataPipe)#")


def step_breakdown(events: Iterable[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """``{"steps": [names], "per_step": [{column: µs}], "avg": {column: µs}, "dataloader_frac": float}``;
    None for a trace without steps and without host operators."""
    steps: list[Interval] = []
    names: list[str] = []
    roles: dict[str, list[Interval]] = {r: [] for r in ROLES}
    host: list[tuple[str, str, Interval]] = []  # (kind, name, span) of operators, annotations, python events
    runtimes: list[tuple[float, float, Any]] = []  # (start, end, correlation)
    device: list[tuple[float, float, Any, Any]] = []  # kernels only: (start, end, correlation, external id)
    links: list[tuple[float, float, Any]] = []  # every device event, for step alignment
    comm_ops: set = set()
    cpu_min, cpu_max = float(sys.maxsize), float(-sys.maxsize - 1)
    for e in events:
        if e.get("ph") != "X":
            continue
        kind = _KIND.get(str(e.get("cat") or "").lower())
        if kind is None:
            continue
        name, span = e.get("name") or "", (e["ts"], e["ts"] + e["dur"])
        args = e.get("args") or {}
        if kind in ("kernel", "memcpy", "memset"):
            links.append((span[0], span[1], args.get("correlation")))
            if kind == "kernel":
                device.append((span[0], span[1], args.get("correlation"), _external_id(args)))
            else:
                roles["Memcpy" if kind == "memcpy" else "Memset"].append(span)
        elif kind == "runtime":
            runtimes.append((span[0], span[1], args.get("correlation")))
            roles["Runtime"].append(span)
        elif name.startswith("ProfilerStep#") and kind in ("op", "annotation"):
            steps.append(span)
            names.append(name.split("#", 1)[1])
            cpu_min, cpu_max = min(cpu_min, span[0]), max(cpu_max, span[1])
        else:
            if name in _COMM_OPS:
                comm_ops.add(_external_id(args))
            if kind in ("op", "python"):
                cpu_min, cpu_max = min(cpu_min, span[0]), max(cpu_max, span[1])
            host.append((kind, name, span))
    for kind, name, span in host:
        if kind != "python" and _is_dataloader(name):
            roles["DataLoader"].append(span)
        elif name in _COMM_OPS:
            roles["Communication"].append(span)
        else:
            roles["CpuOp"].append(span)
    for start, end, _, ext in device:
        roles["Communication" if ext is not None and ext in comm_ops else "Kernel"].append((start, end))
    if not steps:
        if cpu_min > cpu_max:
            return None
        steps, names = [(cpu_min, cpu_max)], ["0"]
    steps, names = _device_steps(steps, names, runtimes, links)
    return _aggregate(steps, names, {r: union(v) for r, v in roles.items()})


def _device_steps(
    steps: list[Interval], names: list[str], runtimes: list[tuple[float, float, Any]], links: list[tuple[float, float, Any]]
) -> tuple[list[Interval], list[str]]:
    """Move steps to the device side, as torch-tb-profiler's ``StepParser`` does."""
    by_corr: dict[Any, list[int]] = {}
    for i, (_, _, corr) in enumerate(links):
        by_corr.setdefault(corr, []).append(i)
    ordered = sorted(runtimes, key=lambda r: r[0])
    big, small = float(sys.maxsize), float(-sys.maxsize - 1)
    steps_device = [(big, small)] * len(steps)
    matched_count = [0] * len(steps)
    matched: set[int] = set()
    i_step = i_rt = 0
    lo, hi = big, small
    while i_step < len(steps) and i_rt < len(ordered):
        start, end = steps[i_step]
        rt_start, rt_end, corr = ordered[i_rt]
        if rt_start < start:
            i_rt += 1
        elif rt_end <= end:
            for d in by_corr.get(corr, ()):
                lo, hi = min(links[d][0], lo), max(links[d][1], hi)
                matched.add(d)
                matched_count[i_step] += 1
            i_rt += 1
        elif rt_start < end:
            i_rt += 1
        else:
            steps_device[i_step] = (lo, hi)
            i_step += 1
            lo, hi = big, small
    while i_step < len(steps):
        steps_device[i_step] = (lo, hi)
        lo, hi = big, small
        i_step += 1
    if not matched:
        return steps, names
    prev_end = steps[0][0]
    if steps_device[0][0] != big:
        for d, (_, link_end, _) in enumerate(links):
            if d not in matched and link_end < steps_device[0][0]:
                prev_end = max(prev_end, link_end)
    moved = []
    for (start, end), (dev_lo, dev_hi) in zip(steps, steps_device):
        start = max(prev_end, start)
        end = max(end, start) if dev_lo == big else max(end, dev_hi, start)
        moved.append((start, end))
        prev_end = end
    keep = len(moved)
    if len(moved) > 1:
        last = max((i for i, n in enumerate(matched_count) if n > 0), default=-1)
        if last >= 0:
            keep = last + 1
            if last > 0 and matched_count[last - 1] * 0.8 > matched_count[last]:
                keep = last
    return moved[:keep], names[:keep]


def _aggregate(steps: list[Interval], names: list[str], roles: dict[str, list[Interval]]) -> dict[str, Any]:
    """Hand out step time by role priority (``OverallParser``), per step."""
    cost: dict[str, list[Interval]] = {}
    slots: list[Interval] = []
    for role in ROLES:
        if slots:
            taken = intersect(slots, roles[role])
        else:  # as in torch-tb-profiler: the first role, or any role once nothing is left
            taken = roles[role]
            slots = union(steps)
        cost[role] = taken
        slots = subtract(slots, taken)
    cost["Other"] = slots
    per_step = []
    for start, end in steps:
        row = {role: length(intersect([(start, end)], spans)) for role, spans in cost.items()}
        row["Total"] = end - start
        per_step.append(row)
    avg = {c: sum(r[c] for r in per_step) / len(per_step) for c in COLUMNS}
    total = sum(r["Total"] for r in per_step)
    return {
        "steps": names,
        "per_step": per_step,
        "avg": avg,
        "dataloader_frac": sum(r["DataLoader"] for r in per_step) / total if total else 0.0,
    }
