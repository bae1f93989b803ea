"""Does a written window's trace hold what its window recorded? Pure: over the trace's event dicts and the
window's plan (its ``profkit`` key).

A window recorded steps ``steps`` (training) or batches ``batch_idx`` (validation), each a ``ProfilerStep#N``
span; with ``gpu`` (CUDA among the activities, on a CUDA model) it must hold some GPU activity: kineto loses it
silently when CUPTI fails to attach (pytorch/pytorch#192021). Complete events (``ph: X``) need a duration.
"""

from __future__ import annotations

from typing import Any, Sequence

from lightning_profkit.trace import vocabulary as v

SHOWN = 10  # step numbers named in a problem at most


def problems(events: Sequence[dict[str, Any]], meta: dict[str, Any]) -> list[str]:
    """What the trace lacks against its window's plan, one sentence each; empty when it is whole."""
    planned = meta.get("batch_idx") if meta.get("validation") else meta.get("steps")
    found, open_spans, device = set(), 0, 0
    for event in events:
        name, phase = event.get("name"), event.get("ph")
        if phase == "X":
            if not isinstance(event.get("dur"), (int, float)):
                open_spans += 1
            elif isinstance(name, str) and v.is_step(name):
                found.add(v.step_number(name))
            if str(event.get("cat", "")).lower() in v.DEVICE:
                device += 1
    out = []
    if planned:
        missing = [n for n in range(planned[0], planned[1] + 1) if n not in found]
        if missing:
            listed = ", ".join(map(str, missing[:SHOWN])) + (", ..." if len(missing) > SHOWN else "")
            out.append(f"{len(missing)} of the {planned[1] - planned[0] + 1} recorded steps have no ProfilerStep "
                       f"span in the trace ({listed})")
    if open_spans:
        out.append(f"{open_spans} complete event(s) have no duration")
    if meta.get("gpu") and not device:
        out.append("no GPU activity although CUDA was profiled on a CUDA model (CUPTI may have failed to attach; "
                   "see pytorch/pytorch#192021)")
    return out
