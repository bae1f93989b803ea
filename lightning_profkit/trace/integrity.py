"""Does a written window's trace hold what its window recorded (docs/profkit.md, notes)? Design notes:
docs/how-it-works.md."""

from __future__ import annotations

from typing import Any

import numpy as np

from lightning_profkit.trace import vocabulary as v
from lightning_profkit.trace.columns import Columns

SHOWN = 10  # step numbers named in a problem at most


def problems(columns: Columns, meta: dict[str, Any]) -> list[str]:
    """What the trace lacks against its window's plan, one sentence each; empty when it is whole."""
    planned = meta.get("batch_idx") if meta.get("validation") else meta.get("steps")
    timed = np.isfinite(columns.dur)
    named = np.unique(columns.name[timed])
    found = {v.step_number(columns.names[code]) for code in named.tolist() if v.is_step(columns.names[code])}
    open_spans = int(timed.size - np.count_nonzero(timed))
    device = bool(columns.cat_mask(*v.DEVICE).any())
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
