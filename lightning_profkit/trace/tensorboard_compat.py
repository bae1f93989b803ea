"""Make traces written by current torch show their DataLoader time in torch-tb-profiler 0.4.3.

The released plugin drops ``user_annotation`` events (only ``ProfilerStep#`` and collective names
survive), and torch records ``enumerate(DataLoader)#...__next__`` under that category, so its Overview
reports DataLoader = 0 (pytorch/kineto #610, #844). Re-labelling exactly those events as ``cpu_op``
restores the plugin's DataLoader figure. Nothing else changes: timing, names, ids and the
``cuda_runtime`` / GPU events that HolisticTraceAnalysis and Perfetto read are left as written.
"""

from __future__ import annotations

from typing import Any, Iterable

from lightning_profkit.trace.vocabulary import CPU_OP, USER_ANNOTATION, is_dataloader_event


def relabel_dataloader_events(events: Iterable[dict[str, Any]]) -> int:
    """Re-categorise DataLoader spans recorded as ``user_annotation`` to ``cpu_op``; return how many."""
    changed = 0
    for event in events:
        if event.get("cat") == USER_ANNOTATION and event.get("ph") == "X" and is_dataloader_event(event.get("name") or ""):
            event["cat"] = CPU_OP
            changed += 1
    return changed
