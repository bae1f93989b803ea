"""Terminal tables for ``profkit summary`` and ``profkit compare``: aligned columns, colour only on a TTY."""

from __future__ import annotations

import os
import sys
from typing import Any, Optional, Sequence, TextIO

from lightning_profkit.trace.step_breakdown import ROLES
from lightning_profkit.trace.summary import key_figures

_LABELS = {"CpuOp": "CPU Exec", "Communication": "Comm"}
ABSENT = "-"


def use_color(stream: TextIO) -> bool:
    return stream.isatty() and not os.environ.get("NO_COLOR")


def _pct(value: Optional[float]) -> str:
    return ABSENT if value is None else f"{100 * value:.1f}%"


def _ms(value: Optional[float]) -> str:
    return ABSENT if value is None else f"{value:.2f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], color: bool = False) -> str:
    """Text columns: the first left-aligned, the others right-aligned."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        parts = [str(c).ljust(widths[0]) if i == 0 else str(c).rjust(widths[i]) for i, c in enumerate(cells)]
        return "  ".join(parts).rstrip()

    head = line(headers)
    if color:
        head = f"\033[1m{head}\033[0m"
    return "\n".join([head, *(line(r) for r in rows)])


def _title(text: str, color: bool) -> str:
    return f"\033[1m{text}\033[0m" if color else text


def _trace_label(s: dict[str, Any]) -> str:
    return f"{s['window']}/{s['worker']}" if s.get("window") else s["worker"]


def summary_text(summaries: Sequence[dict[str, Any]], agg: dict[str, Any], color: bool = False) -> str:
    # (label, steps, key figures) per trace, and a mean row when there are several
    lines = [
        (_trace_label(s), str(len(s["step_breakdown"]["steps"]) if s.get("step_breakdown") else 0), key_figures(s))
        for s in summaries
    ]
    if len(summaries) > 1:
        lines.append(("mean", "", agg["figures"]))
    out = [_title("Step time breakdown (torch-tb-profiler Overview, with kineto's later fixes), share of step time", color)]
    rows = [[label, n, _ms(fig["step_time_ms"])] + [_pct(fig[f"share/{r}"]) for r in ROLES + ("Other",)]
            for label, n, fig in lines]
    out.append(table(["trace", "steps", "step ms"] + [_LABELS.get(r, r) for r in ROLES + ("Other",)], rows, color))
    rows = [
        [label, _pct(fig["data_wait_share"]), _pct(fig["gpu_idle_share"]), _ms(fig["blocking_sync_ms_per_step"]),
         _pct(fig["hta/idle"]), _pct(fig["hta/compute"]), _pct(fig["hta/non_compute"])]
        for label, _, fig in lines
    ]
    out += ["", _title("Host steps and GPU (HTA temporal breakdown: first to last GPU activity)", color)]
    out.append(table(["trace", "data wait", "GPU idle", "sync ms/step", "HTA idle", "compute", "non-compute"], rows, color))

    figures = agg["figures"]
    sync = [(k.split("/", 1)[1], v) for k, v in figures.items() if k.startswith("sync_ms_per_step/") and v]
    if sync:
        out += ["", _title("Blocking CUDA calls inside steps, ms per step (mean over traces)", color)]
        out.append(table(["call", "ms/step"], [[n, _ms(v)] for n, v in sorted(sync, key=lambda kv: -kv[1])], color))
    peaks = [(k.split("/", 1)[1], v) for k, v in figures.items() if k.startswith("peak_memory_mb/") and v is not None]
    if peaks:
        out += ["", _title("Peak memory allocated, MB (device type:id; mean over traces)", color)]
        out.append(table(["device", "MB"], [[d, f"{v:.1f}"] for d, v in peaks], color))

    per = max(agg["traces"], 1)
    for key, title, field in (
        ("cpu_by_self", "Top CPU operators by self (exclusive) time", "self_us"),
        ("cpu_by_total", "Top CPU operators by total (inclusive) time", "total_us"),
        ("device_by_total", "Top GPU kernels and copies by time", "total_us"),
    ):
        rows = [[_short(r["name"]), f"{r['calls'] / per:.0f}", f"{r[field] / per / 1000:.2f}"] for r in agg["operators"][key]]
        if rows:
            out += ["", _title(f"{title} (per trace)", color)]
            out.append(table(["name", "calls", "ms"], rows, color))
    notes = sorted({f"{_trace_label(s)}: {n}" for s in summaries for n in s.get("notes", [])})
    if notes:
        out += ["", "Notes:"] + [f"  {n}" for n in notes]
    return "\n".join(out)


def short_summary(agg: dict[str, Any]) -> str:
    """Two lines for the end of ``fit``: the step's make-up and the costliest operator."""
    fig = agg["figures"]
    if fig.get("step_time_ms") is None:
        return "no step figures (the windows hold no ProfilerStep)"
    shares = sorted(((fig[f"share/{r}"] or 0.0, _LABELS.get(r, r)) for r in ROLES + ("Other",)), reverse=True)
    parts = ", ".join(f"{label} {100 * v:.0f}%" for v, label in shares if v >= 0.005)
    line = (f"step {fig['step_time_ms']:.1f} ms = {parts}; data wait {_pct(fig['data_wait_share'])}, "
            f"GPU idle {_pct(fig['gpu_idle_share'])}")
    ops = agg["operators"]["cpu_by_self"]
    if ops:
        line += f"; most CPU self time: {_short(ops[0]['name'], 40)} ({ops[0]['self_us'] / max(agg['traces'], 1) / 1000:.1f} ms per window)"
    return line


def compare_text(cmp: dict[str, Any], color: bool = False) -> str:
    rows = []
    for key, row in cmp["figures"].items():
        fmt = _ms if key.endswith(("_ms", "ms_per_step")) or "/" in key and key.split("/")[0].endswith(("ms_per_step", "_mb")) else _pct
        if key.startswith("peak_memory_mb/"):
            fmt = lambda v: ABSENT if v is None else f"{v:.1f}"  # noqa: E731
        diff = row["diff"]
        text = ABSENT if diff is None else ("+" if diff > 0 else "") + fmt(diff)
        if color and diff:
            text = f"\033[{31 if diff > 0 else 32}m{text}\033[0m"
        rows.append([_figure_label(key), fmt(row["a"]), fmt(row["b"]), text])
    out = [_title(f"A: {cmp['traces']['a']} trace(s), B: {cmp['traces']['b']} trace(s); means over traces", color)]
    out.append(table(["figure", "A", "B", "B - A"], rows, color))
    ops = [[_short(r["name"]), _ms(_div(r["a_self_us"])), _ms(_div(r["b_self_us"]))] for r in cmp["cpu_by_self_per_trace"]]
    if ops:
        out += ["", _title("Top CPU operators by self time, ms per trace", color)]
        out.append(table(["name", "A", "B"], ops, color))
    return "\n".join(out)


def _div(us: Optional[float]) -> Optional[float]:
    return None if us is None else us / 1000


def _figure_label(key: str) -> str:
    if key.startswith("share/"):
        role = key.split("/", 1)[1]
        return f"step share {_LABELS.get(role, role)}"
    return key.replace("_", " ")


def _short(name: str, width: int = 70) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def write(text: str, stream: Optional[TextIO] = None) -> None:
    stream = stream or sys.stdout
    stream.write(text + "\n")
