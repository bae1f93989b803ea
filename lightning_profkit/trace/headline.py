"""The end-of-fit line over a fit's windows, and names from a trace made safe and short for a line or a table column.
Pure."""

from __future__ import annotations

import re
from typing import Any, Optional

from lightning_profkit.idle_causes import CAUSES, advice, blocking_by_call, largest, share_name
from lightning_profkit.printable import printable
from lightning_profkit.trace.vocabulary import STEP_PARTS

ABSENT = "-"


def percent(value: Optional[float]) -> str:
    """A fraction as a percentage with one decimal; ``-`` when absent."""
    return ABSENT if value is None else f"{100 * value:.1f}%"


def fit_line(agg: dict[str, Any]) -> list[str]:
    """Lines for the end of ``fit``, each within a terminal's 120 characters: the profiled step's time, data wait and
    GPU idle, its make-up, and the costliest operator, under the names of ``profkit summary``. Profiled steps run
    slower than the others (the profiler's own work): the training process adds the unprofiled steps' time."""
    fig = agg["figures"]
    if fig.get("step_time_ms") is None:
        return ["no step figures: the windows hold no ProfilerStep"]
    head = f"a profiled step took {fig['step_time_ms']:.1f} ms, data wait {percent(fig['data_wait_share'])}"
    if fig["gpu_idle_share"] is not None:
        head += f", GPU idle {percent(fig['gpu_idle_share'])}"
    shares = sorted(((fig[f"share/{r}"] or 0.0, r) for r in STEP_PARTS), reverse=True)
    lines = [head, "its time: " + ", ".join(f"{role} {100 * v:.0f}%" for v, role in shares if v >= 0.005)]
    idle = {cause: fig.get(share_name(cause)) for cause in CAUSES}
    cause = largest(idle)
    if cause is not None and (fig["gpu_idle_share"] or 0.0) >= 0.005:  # why the GPU idled, and what to do
        split = ", ".join(f"{c} {percent(v)}" for c, v in sorted(idle.items(), key=lambda kv: -(kv[1] or 0.0))
                          if (v or 0.0) >= 0.0005)
        lines += [f"GPU idle by cause: {split}", f"what to do: {advice(cause, blocking_by_call(fig))}"]
    ops = agg["operators"]["cpu_by_self"]
    if ops:
        per_window = ops[0]["self_us"] / max(agg["traces"], 1) / 1000
        lines.append(f"most CPU self time: {short_name(ops[0]['name'], 60)}, {per_window:.1f} ms a window")
    return lines


# where a name may be cut: after a separator ("::" whole), never inside a word or a collapsed group
_BREAK = re.compile(r"(?:(?<=[#./ (_])|(?<=::))(?![…:])")


LONGEST = 2048  # a C++ operator's name with its template arguments may run to a few thousand characters


def short_name(name: str, width: int = 70) -> str:
    """``name`` in at most ``width`` characters, cut between words: C++ template arguments and a trailing
    parameter list become ``<…>`` and ``(…)``, then the start gives way to the distinctive end; made
    :func:`printable` first. Only a name's first and last :data:`LONGEST` characters are looked at."""
    if len(name) > 2 * LONGEST:
        name = name[:LONGEST] + "…" + name[-LONGEST:]
    name = printable(name)
    if len(name) <= width:
        return name
    name = _collapse(name, "<", ">")
    if len(name) > width and name.endswith(")"):
        name = _collapse(name, "(", ")", last_only=True)
    if len(name) <= width:
        return name
    for cut in (m.start() for m in _BREAK.finditer(name)):
        if len(name) - cut + 1 <= width:
            return "…" + name[cut:]
    return "…" + name[len(name) - width + 1:]  # one word longer than the width


def _collapse(name: str, open_: str, close: str, last_only: bool = False) -> str:
    """Outermost ``open_ … close`` groups shown as ``open_…close`` (only the one ending the name, if ``last_only``)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(name):
        if ch == open_:
            depth += 1
            if depth == 1:
                start = i
        elif ch == close and depth:
            depth -= 1
            if depth == 0 and (not last_only or i == len(name) - 1):
                out.append((start, i))
    for start, end in reversed(out[-1:] if last_only else out):
        name = name[: start + 1] + "…" + name[end:]
    return name
