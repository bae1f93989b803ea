"""Time per operator: CPU operators' inclusive and self (exclusive) time, and time per GPU kernel. Pure."""

from __future__ import annotations

from typing import Any, Iterable

# host events nested by containment; runtime calls count as children so that an operator's self time
# leaves out the CUDA calls it makes (as torch's own tables do)
_CPU_CATS = {"cpu_op", "operator", "user_annotation", "cuda_runtime", "runtime", "cuda_driver"}
_DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}


def operator_times(events: Iterable[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """``{"cpu": {name: {calls, total_us, self_us}}, "device": {name: {calls, total_us}}}``.

    A CPU operator's self time is its duration less that of the operators directly inside it on the same
    thread (nesting by containment, as torch-tb-profiler and the autograd profiler build their trees).
    """
    threads: dict[tuple, list[tuple[float, float, str]]] = {}
    device: dict[str, dict[str, float]] = {}
    for e in events:
        if e.get("ph") != "X":
            continue
        cat = str(e.get("cat") or "").lower()
        if cat in _CPU_CATS:
            if (e.get("name") or "").startswith("ProfilerStep#"):
                continue  # steps are reported by the step breakdown
            threads.setdefault((e.get("pid"), e.get("tid")), []).append((e["ts"], e["ts"] + e["dur"], e.get("name") or ""))
        elif cat in _DEVICE_CATS:
            row = device.setdefault(e.get("name") or "", {"calls": 0, "total_us": 0.0})
            row["calls"] += 1
            row["total_us"] += e["dur"]
    cpu: dict[str, dict[str, float]] = {}
    for spans in threads.values():
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack: list[list] = []  # [end, name, self_us]

        def close(entry: list) -> None:
            row = cpu[entry[1]]
            row["self_us"] += entry[2]

        for start, end, name in spans:
            while stack and stack[-1][0] <= start:
                close(stack.pop())
            row = cpu.setdefault(name, {"calls": 0, "total_us": 0.0, "self_us": 0.0})
            row["calls"] += 1
            row["total_us"] += end - start
            if stack and end <= stack[-1][0]:
                stack[-1][2] -= end - start  # a direct child: not the parent's own time
            stack.append([end, name, end - start])
        while stack:
            close(stack.pop())
    return {"cpu": cpu, "device": device}


def top(table: dict[str, dict[str, float]], key: str, n: int = 10) -> list[dict[str, Any]]:
    """The ``n`` rows with the largest ``key``, as ``{"name": ..., **row}``."""
    rows = sorted(table.items(), key=lambda kv: -kv[1][key])[:n]
    return [{"name": name, **row} for name, row in rows]
