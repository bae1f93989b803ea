"""Terminal tables for ``profkit summary`` and ``profkit compare``: aligned columns, colour only on a TTY."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from dataclasses import fields
from typing import Any, Callable, Optional, Sequence

from lightning_profkit.idle_causes import CAUSES, blocking_by_call, share_name, verdict
from lightning_profkit.printable import printable, redact
from lightning_profkit.trace.headline import ABSENT
from lightning_profkit.trace.headline import percent as _pct
from lightning_profkit.trace.headline import short_name
from lightning_profkit.trace.ranks import BALANCED_SHARE, RankFigures, named, ranks_to_show
from lightning_profkit.trace.vocabulary import STEP_PARTS
from lightning_profkit.trace.summary import key_figures, unit

HOST = ("data_wait_share", "gpu_idle_share", "blocking_sync_ms_per_step", "hta/idle", "hta/compute", "hta/non_compute")


def use_color() -> bool:
    """Whether standard output, where :func:`write` writes, is a terminal that takes colour."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def _ms(value: Optional[float]) -> str:
    return ABSENT if value is None else f"{value:.2f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], color: bool = False,
          last_colors: Sequence[int] = ()) -> str:
    """Text columns: the first left-aligned, the others right-aligned; every cell :func:`printable`. With ``color``,
    a row's last cell in its terminal colour from ``last_colors`` (one a row, 0: none), once escaped and aligned."""
    headers, rows = [printable(str(c)) for c in headers], [[printable(str(c)) for c in r] for r in rows]
    widths = [max(map(len, column)) for column in zip(headers, *rows)]

    def line(cells: Sequence[str], code: int = 0) -> str:
        aligned = [cells[0].ljust(widths[0]), *map(str.rjust, cells[1:], widths[1:])]
        if color and code:
            aligned[-1] = " " * (widths[-1] - len(cells[-1])) + f"\033[{code}m{cells[-1]}\033[0m"
        return "  ".join(aligned).rstrip()

    return "\n".join([_title(line(headers), color), *map(line, rows, last_colors or [0] * len(rows))])


def _title(text: str, color: bool) -> str:
    return f"\033[1m{text}\033[0m" if color else text


def trace_labels(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """A label per trace: ``window/worker``, or ``window/file name`` where two traces would share one (as
    Lightning's PyTorchProfiler names its files)."""
    labels = [f"{s['window']}/{s['worker']}" if s.get("window") else s["worker"] for s in summaries]
    seen = Counter(labels)
    return [label if seen[label] == 1 else "/".join(filter(None, [s.get("window"), os.path.basename(s["path"])]))
            for label, s in zip(labels, summaries)]


# RankFigures' figures after the rank (the first column), its causes shown as the largest
RANK_COLUMNS = (*(f.name for f in fields(RankFigures)[1:-1]), "gpu_idle_largest")


def ranks_text(ranks: dict[str, Any], color: bool = False) -> list[str]:
    """The per-rank table and the verdict line."""
    picked, left = ranks_to_show(ranks)
    rows = [[str(r["rank"]), str(r["traces"]), *(fmt(k)(r[k]) for k in RANK_COLUMNS[1:-1]),
             RankFigures(**r).gpu_idle_largest or ABSENT] for r in picked]
    out = ["", _title("Ranks, ms per step (own: the step less communication, where a rank waits for the others)", color),
           table(["rank", *RANK_COLUMNS], rows, color)]
    if left:
        out.append(f"{len(picked)} of {len(picked) + left} ranks: the slowest, the outliers, the median and the fastest; "
                   "--json has all")
    return out + ["", *verdict_lines(ranks["verdict"])]


def verdict_lines(verdict: dict[str, Any]) -> list[str]:
    """The cross-rank verdict: its headline, then the spread of the ranks' own work and the ranks named."""
    own = verdict["own_ms_per_step"]
    out = [f"Verdict: {printable(verdict['headline'])}",
           f"  own work per step: median {own['median']:.2f}, p90 {own['p90']:.2f}, max {own['max']:.2f} ms"]
    over = f"over the median by more than {100 * BALANCED_SHARE:.0f}% of a step"
    for key, field, says in (("outliers", "own_ms_per_step_over_median", over),
                             ("waiting", "extra_communication_ms_per_step", "waiting for it in communication")):
        if verdict.get(key):
            out += [f"  {says}:", f"    {named({r['rank']: r[field] for r in verdict[key]})}"]
    return out


def summary_text(summaries: Sequence[dict[str, Any]], agg: dict[str, Any], color: bool = False,
                 ranks: Optional[dict[str, Any]] = None) -> str:
    """``profkit summary``'s tables and the traces' notes."""
    labels = trace_labels(summaries)
    # (label, steps, key figures) of each trace, and of their mean where there are several
    lines = [(label, str(len(s["step_breakdown"]["steps"]) if s.get("step_breakdown") else 0), key_figures(s))
             for label, s in zip(labels, summaries)] + ([("mean", "", agg["figures"])] if len(summaries) > 1 else [])
    out = _step_tables(lines, color) + _idle_lines(lines, agg["figures"], color)
    if ranks is not None:
        out += ranks_text(ranks, color)
    out += _device_tables(agg["figures"], color) + _operator_tables(agg, color)
    notes = list(dict.fromkeys(f"{label}: {n}" for label, s in zip(labels, summaries) for n in s.get("notes", [])))
    if notes:
        out += ["", "Notes:"] + [f"  {printable(n)}" for n in notes]
    return "\n".join(out)


def _step_tables(lines: list[tuple[str, str, dict[str, Any]]], color: bool) -> list[str]:
    """The step time breakdown and the host figures, a row for each of ``lines``."""
    shares = [[label, n, _ms(fig["step_time_ms"])] + [_pct(fig[f"share/{r}"]) for r in STEP_PARTS]
              for label, n, fig in lines]
    host = [[label] + [fmt(key)(fig[key]) for key in HOST] for label, _, fig in lines]
    return [
        _title("Step time breakdown of the profiled steps, % of the step time (legend: profkit summary --help)", color),
        table(["trace", "steps", "step_time_ms", *STEP_PARTS], shares, color),
        "", _title("Host steps and GPU, % or ms per step (hta/: HolisticTraceAnalysis's temporal breakdown)", color),
        table(["trace", *HOST], host, color),
    ]


def _idle_lines(lines: list[tuple[str, str, dict[str, Any]]], figures: dict[str, Any], color: bool) -> list[str]:
    """Why the GPU idled, a row for each of ``lines``, and what to do about ``figures``; nothing where no trace has
    GPU activity."""
    if figures.get("gpu_idle_share") is None:
        return []
    rows = [[label, _pct(fig["gpu_idle_share"]), *(_pct(fig[share_name(c)]) for c in CAUSES)]
            for label, _, fig in lines]
    said = verdict(figures["gpu_idle_share"], {c: figures[share_name(c)] for c in CAUSES}, blocking_by_call(figures))
    return ["", _title("Why the GPU idled, % of the profiled steps as the GPU ran them, by what the training process "
                       "was doing", color),
            table(["trace", "gpu_idle_share", *map(share_name, CAUSES)], rows, color),
            *(f"Verdict: {said[0]}", *(f"  {line}" for line in said[1:]))]


def _device_tables(figures: dict[str, Any], color: bool) -> list[str]:
    """The blocking CUDA calls and the peak memory, where the traces have them."""
    out = []
    sync = list(blocking_by_call(figures).items())
    if sync:
        out += ["", _title("Blocking CUDA calls inside steps, ms per step (mean over traces)", color),
                table(["call", "ms/step"], [[n, _ms(v)] for n, v in sorted(sync, key=lambda kv: -kv[1])], color)]
    peaks = [(k.split("/", 1)[1], v) for k, v in figures.items() if k.startswith("peak_memory_mb/") and v is not None]
    if peaks:
        out += ["", _title("Peak memory allocated, MB (device type:id; mean over traces)", color),
                table(["device", "MB"], [[d, f"{v:.1f}"] for d, v in peaks], color)]
    return out


def _operator_tables(agg: dict[str, Any], color: bool) -> list[str]:
    """The top CPU operators and GPU kernels; calls counted over all traces (a mean would round 4 in 8 traces to 0)."""
    out = []
    per = max(agg["traces"], 1)
    counted = ["name", "calls", "ms"] if per == 1 else ["name", f"calls in {per} traces", "ms per trace"]
    for key, title, field in (
        ("cpu_by_self", "Top CPU operators by self (exclusive) time", "self_us"),
        ("cpu_by_total", "Top CPU operators by total (inclusive) time", "total_us"),
        ("device_by_total", "Top GPU kernels and copies by time", "total_us"),
    ):
        rows = [[short_name(r["name"]), f"{r['calls']:.0f}", f"{r[field] / per / 1000:.2f}"] for r in agg["operators"][key]]
        if rows:
            out += ["", _title(title, color), table(counted, rows, color)]
    return out


def fmt(key: str) -> Callable[[Optional[float]], str]:
    """How a figure is printed, by its unit: fractions as %, times in ms, memory in MB."""
    kind = unit(key)
    if kind == "fraction":
        return _pct
    if kind == "MB":
        return lambda v: ABSENT if v is None else f"{v:.1f}"
    return _ms


def _difference(key: str, diff: Optional[float]) -> str:
    """B - A: percentage points for fractions, else in the figure's unit; signed."""
    if diff is None:
        return ABSENT
    sign = "+" if diff > 0 else ""
    if unit(key) == "fraction":
        return f"{sign}{100 * diff:.1f} pp"
    return sign + fmt(key)(diff)


def compare_text(cmp: dict[str, Any], color: bool = False) -> str:
    figures = cmp["figures"].items()
    rows = [[key, fmt(key)(row["a"]), fmt(key)(row["b"]), _difference(key, row["diff"])] for key, row in figures]
    colors = [31 if row["diff"] and row["diff"] > 0 else 32 if row["diff"] else 0 for _, row in figures]  # red: B more
    out = [_title(f"A: {cmp['traces']['a']} trace(s), B: {cmp['traces']['b']} trace(s); means over traces "
                  "(B - A of a % in percentage points, pp)", color),
           table(["figure", "A", "B", "B - A"], rows, color, colors)]
    ops = [[short_name(r["name"]), *(_ms(None if us is None else us / 1000) for us in (r["a_self_us"], r["b_self_us"]))]
           for r in cmp["cpu_by_self_per_trace"]]
    if ops:
        out += ["", _title("Top CPU operators by self time, ms per trace", color),
                table(["name", "A", "B"], ops, color)]
    return "\n".join(out)


def json_text(value: Any) -> str:
    """``json.dumps(value, indent=1)``'s text, encoded in C (a summary may hold millions of values)."""
    import msgspec

    try:
        return msgspec.json.format(msgspec.json.encode(value), indent=1).decode()
    except UnicodeEncodeError:  # a file name that is not UTF-8: its bytes as escapes
        return json.dumps(value, indent=1)


def write(text: str) -> None:
    """``text`` on standard output, the user information of every URL in it shown as ``***``."""
    sys.stdout.write(redact(text) + "\n")
