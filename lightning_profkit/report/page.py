"""The report page: HTML with inline SVG charts and style, which opens offline in any browser and prints."""

from __future__ import annotations

import datetime
import html
import math
import os
import re
import urllib.parse
from typing import Any, Optional, Sequence

from lightning_profkit.alerts import MARKDOWN_ESCAPABLE
from lightning_profkit.idle_causes import CAUSES, share_name
from lightning_profkit.report.run_data import Epoch, RunData
from lightning_profkit.trace.headline import ABSENT
from lightning_profkit.trace.headline import percent as _pct
from lightning_profkit.trace.ranks import NAMED_WAITING, ranks_section, ranks_to_show
from lightning_profkit.trace.vocabulary import STEP_PARTS
from lightning_profkit.trace.summary import key_figures

COLORS = dict(zip(STEP_PARTS, ("#4e79a7", "#f28e2b", "#edc948", "#b07aa1", "#76b7b2", "#e15759", "#59a14f", "#bab0ac")))
SERIES_COLORS = ("#e15759", "#4e79a7", "#59a14f", "#f28e2b")
TOP_OPERATORS = 5
TICKS = 20  # epoch numbers on a chart's axis at most
DOTTED = 60  # points of a series drawn as dots, at most (more: the line alone)
EPOCH_ROWS = 100  # epochs in the table at most: the first and the last half of them, with how many lie between
SHOWN_ALERTS = 50  # alerts on the page at most, the first of them

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#222;max-width:980px;margin:24px auto;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}.muted{color:#666}table{border-collapse:collapse;margin:6px 0}
td,th{padding:3px 10px;border-bottom:1px solid #eee;text-align:right}td:first-child,th:first-child{text-align:left}
code{background:#f4f4f4;padding:1px 4px;border-radius:3px}.alert{border-left:4px solid #e15759;background:#fff5f5;padding:6px 12px;margin:10px 0}
.legend span{display:inline-block;margin-right:12px}.legend i{display:inline-block;width:10px;height:10px;margin-right:4px}
svg text{font:11px system-ui,sans-serif;fill:#444}@media print{body{margin:0;max-width:none}.alert,.window{break-inside:avoid}}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _n(value: Any, spec: str = ".2f", scale: float = 1.0) -> str:
    """A number as ``spec`` formats it; "-" for anything else (absent, NaN, or not a number in a file made by hand)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return "-"
    return format(value * scale, spec)


def _ms(value: Optional[float]) -> str:
    return ABSENT if value is None else f"{value:.2f} ms"


def line_chart(title: str, xs: Sequence[int], series: dict[str, Sequence[Optional[float]]], unit: str,
               scale: float = 1.0, width: int = 640, height: int = 200) -> str:
    """Lines over epochs, one per series (absent points skipped), with axes, a y grid and a legend."""
    left, right, top, bottom = 48, 12, 10, 28
    series = {name: values for name, values in series.items() if any(v is not None for v in values)}  # logged ones
    points = [v * scale for values in series.values() for v in values if v is not None]
    if not xs or not points:
        return f"<p class='muted'>{_e(title)}: not logged by this run.</p>"
    y_max = max(points) * 1.1 or 1.0
    x_lo, x_hi = min(xs), max(max(xs), min(xs) + 1)
    x = lambda v: left + (v - x_lo) / (x_hi - x_lo) * (width - left - right)  # noqa: E731
    y = lambda v: top + (1 - v / y_max) * (height - top - bottom)  # noqa: E731
    out = [f"<svg class='chart' role='img' aria-label='{_e(title)}' width='{width}' height='{height}' "
           f"viewBox='0 0 {width} {height}'>"]
    for k in range(5):
        value = y_max * k / 4
        out.append(f"<line x1='{left}' x2='{width - right}' y1='{y(value):.1f}' y2='{y(value):.1f}' stroke='#eee'/>"
                   f"<text x='{left - 6}' y='{y(value) + 4:.1f}' text-anchor='end'>{value:.3g}</text>")
    shown = sorted(set(xs))
    for e in shown[::max(1, math.ceil(len(shown) / TICKS))]:
        out.append(f"<text x='{x(e):.1f}' y='{height - 10}' text-anchor='middle'>{e}</text>")
    out.append(f"<text x='{left}' y='{height}' class='muted'>epoch; {_e(unit)}</text>")
    for color, (name, values) in zip(SERIES_COLORS, series.items()):
        pts = [(x(e), y(v * scale)) for e, v in _thinned([(e, v) for e, v in zip(xs, values) if v is not None],
                                                           width - left - right)]
        if len(pts) > 1:
            out.append(f"<polyline class='series' fill='none' stroke='{color}' stroke-width='2' "
                       f"points='{' '.join(f'{a:.1f},{b:.1f}' for a, b in pts)}'/>")
        if len(pts) <= DOTTED:
            out += [f"<circle cx='{a:.1f}' cy='{b:.1f}' r='3' fill='{color}'><title>{_e(name)}</title></circle>"
                    for a, b in pts]
    out.append("</svg>")
    legend = "".join(f"<span><i style='background:{c}'></i>{_e(n)}</span>" for c, n in zip(SERIES_COLORS, series))
    return f"<h3>{_e(title)}</h3>" + "".join(out) + f"<div class='legend'>{legend}</div>"


def _thinned(points: list[tuple[float, float]], pixels: int) -> list[tuple[float, float]]:
    """``points`` (in x order) on ``pixels`` columns: where there are more, each column's lowest and highest, so
    that the line keeps every spike and costs the page a few kB whatever the epochs."""
    if len(points) <= 2 * pixels:
        return points
    out = []
    for k in range(pixels):
        column = points[k * len(points) // pixels:(k + 1) * len(points) // pixels]
        out += sorted({min(column, key=lambda p: p[1]), max(column, key=lambda p: p[1])})
    return out


def stacked_bar(shares: dict[str, Optional[float]], width: int = 640, height: int = 22) -> str:
    """The step time as one bar cut by part (shares of the step, 0 to 1)."""
    out, at = [f"<svg class='bar' role='img' aria-label='step time by part' width='{width}' height='{height}'>"], 0.0
    for part in STEP_PARTS:
        share = shares.get(part) or 0.0
        if share <= 0:
            continue
        w = share * width
        out.append(f"<rect x='{at:.1f}' y='0' width='{w:.1f}' height='{height}' fill='{COLORS[part]}'>"
                   f"<title>{part}: {100 * share:.1f}%</title></rect>")
        at += w
    out.append("</svg>")
    legend = "".join(f"<span><i style='background:{COLORS[p]}'></i>{p} {100 * (shares.get(p) or 0):.1f}%</span>"
                     for p in STEP_PARTS if (shares.get(p) or 0) >= 0.0005)
    return "".join(out) + f"<div class='legend'>{legend}</div>"


_ESCAPED = re.compile(f"\\\\([{MARKDOWN_ESCAPABLE}])")  # what alerts.as_text escapes


def _inline(text: str) -> str:
    """One line of an alert's Markdown as HTML: ``**bold**``, ```code```, and what alerts.as_text escaped as written."""
    kept = _ESCAPED.sub(lambda m: f"\x00{ord(m.group(1))}\x00", html.unescape(text).replace("\x00", ""))
    shown = re.sub(r"`([^`]+)`", r"<code>\1</code>", re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", _e(kept)))
    return re.sub("\x00(\\d+)\x00", lambda m: _e(chr(int(m.group(1)))), shown)


def markdown(text: str) -> str:
    """The few Markdown forms an alert uses: paragraphs, ``- `` lists, ``**bold**`` and ```code```."""
    out = []
    for block in text.strip().split("\n\n"):
        lines = block.splitlines()
        if all(line.startswith("- ") for line in lines):
            out.append("<ul>" + "".join(f"<li>{_inline(line[2:])}</li>" for line in lines) + "</ul>")
        else:
            out.append(f"<p>{_inline(' '.join(lines))}</p>")
    return "".join(out)


def _epochs(epochs: list[Epoch]) -> str:
    if not epochs:
        return "<p class='muted'>No per-epoch <code>profkit/</code> metrics in this run's logger files.</p>"
    xs = [e.epoch for e in epochs]
    ranks = any(e.data_wait_ratio_max is not None for e in epochs)  # several ranks: the mean and the worst rank's
    mean = "data-wait ratio, mean over ranks" if ranks else "data-wait ratio"
    series = {mean: [e.data_wait_ratio for e in epochs], "GPU-idle ratio": [e.gpu_idle_ratio for e in epochs]}
    if ranks:
        series["data-wait ratio, worst rank (what alerts read)"] = [e.data_wait_ratio_max for e in epochs]
    worst = "<th>data-wait ratio, worst rank (what alerts read)</th><th>worst rank</th>" if ranks else ""
    parts = [
        line_chart("Data-wait and GPU-idle ratio", xs, series, "%", 100),
        line_chart("Step time", xs, {"mean": [e.step_time_ms_mean for e in epochs],
                                     "p90": [e.step_time_ms_p90 for e in epochs]}, "ms"),
        f"<table><tr><th>epoch</th><th>{mean}</th>{worst}<th>GPU-idle ratio</th><th>step time, mean</th>"
        "<th>step time, p90</th><th>data-wait alert</th></tr>",
    ]
    half = EPOCH_ROWS // 2
    between = len(epochs) - 2 * half
    for k, e in enumerate(epochs if between <= 0 else epochs[:half] + epochs[-half:]):
        if between > 0 and k == half:
            parts.append(f"<tr><td colspan='8' class='muted'>{between} more epochs; the logger's file holds every one"
                         "</td></tr>")
        alert = "-" if e.data_wait_alert is None else ("yes" if e.data_wait_alert else "no")
        rank = _n(e.data_wait_worst_rank, ".0f")
        cells = f"<td>{_pct(e.data_wait_ratio_max)}</td><td>{rank}</td>" if ranks else ""
        parts.append(f"<tr><td>{e.epoch}</td><td>{_pct(e.data_wait_ratio)}</td>{cells}<td>{_pct(e.gpu_idle_ratio)}</td>"
                     f"<td>{_ms(e.step_time_ms_mean)}</td><td>{_ms(e.step_time_ms_p90)}</td><td>{alert}</td></tr>")
    return "".join(parts) + "</table>"


def _alerts(data: RunData) -> str:
    more = lambda n: f"<p class='muted'>{n - SHOWN_ALERTS} more alerts</p>" if n > SHOWN_ALERTS else ""  # noqa: E731
    if data.alerts:
        return "".join(f"<div class='alert'>{markdown(a.markdown)}</div>"
                       for a in data.alerts[:SHOWN_ALERTS]) + more(len(data.alerts))
    flagged = [e for e in data.epochs if e.data_wait_alert]
    if flagged:  # a run without TensorBoard: the epochs, without the alert's text
        return "".join(f"<div class='alert'>Epoch {e.epoch}: data-wait alert, {_pct(e.data_wait_ratio)} of the "
                       "training time waiting for the DataLoader (the advice was in the run's console warning; "
                       "a TensorBoardLogger keeps it)</div>" for e in flagged[:SHOWN_ALERTS]) + more(len(flagged))
    return "<p>No data-wait alert.</p>"


def _inside(path: str, folder: str) -> bool:
    """Whether ``path`` is a file inside ``folder`` (links found through symbolic links resolved first)."""
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return os.path.commonpath([path, folder]) == folder and os.path.isfile(path)


def _href(path: str, here: str) -> str:
    """A relative URL to the file ``path`` from the folder ``here``, percent-encoded and starting with ``./`` or
    ``../`` (no file name can be read as a scheme, ``javascript:``, or a query)."""
    quoted = urllib.parse.quote(os.fsencode(os.path.relpath(path, here).replace(os.sep, "/")))  # its bytes, as named
    return quoted if quoted.startswith("../") else "./" + quoted


def _window(summary: dict[str, Any], here: str, run_dir: str) -> str:
    figures = key_figures(summary)
    steps = len((summary.get("step_breakdown") or {}).get("steps") or [])  # its folder names them
    span = f"{steps} step" + ("" if steps == 1 else "s")
    rank = "" if summary.get("rank") is None else f", rank {summary['rank']}"
    name = _e(os.path.basename(summary["path"]))
    link = f"<a href='{_e(_href(summary['path'], here))}'>{name}</a>" if _inside(summary["path"], run_dir) else name
    out = [f"<div class='window'><h3>{_e(summary.get('window'))}{_e(rank)}</h3>",
           f"<p>{_e(span)}; profiled step time {_ms(figures.get('step_time_ms'))}; data wait {_pct(figures.get('data_wait_share'))}; "
           f"GPU idle {_pct(figures.get('gpu_idle_share'))}{_idle(figures)}. Trace: {link}</p>"]
    out += [f"<p class='note'>{_e(note)}</p>" for note in summary.get("notes", [])]  # an incomplete trace among them
    if summary.get("step_breakdown"):
        out.append(stacked_bar({p: figures.get(f"share/{p}") for p in STEP_PARTS}))
    ops = summary.get("operators", {}).get("cpu", [])[:TOP_OPERATORS]  # most self time first
    if ops:
        out.append("<table><tr><th>top CPU operators by self time</th><th>calls</th><th>self ms, whole window</th></tr>")
        out += [f"<tr><td>{_e(str(o.get('name'))[:90])}</td><td>{_e(o.get('calls'))}</td>"
                f"<td>{_n(o.get('self_us'), scale=1e-3)}</td></tr>" for o in ops]
        out.append("</table>")
    return "".join(out) + "</div>"


def _idle(figures: dict[str, Any]) -> str:
    """The GPU idle time by cause, where the trace has a GPU: ``(data_wait 33.4%, ...)``."""
    parts = [(cause, figures.get(share_name(cause))) for cause in CAUSES]
    shown = ", ".join(f"{cause} {_pct(share)}" for cause, share in parts if share is not None)
    return f" ({_e(shown)})" if shown else ""


def _ranks(ranks: Optional[dict[str, Any]]) -> str:
    if not ranks:
        return ""
    picked, left = ranks_to_show(ranks)
    rows = "".join(f"<tr><td>{_e(r['rank'])}</td><td>{_n(r['step_time_ms'])}</td><td>{_n(r['own_ms_per_step'])}</td>"
                   f"<td>{_n(r['data_ms_per_step'])}</td><td>{_n(r['communication_ms_per_step'])}</td></tr>"
                   for r in picked)
    note = (f"<p class='muted'>{len(picked)} of {len(picked) + left} ranks: the slowest, those outside the "
            "distribution, the median and the fastest; <code>profkit summary --json</code> has every rank.</p>"
            if left else "")
    return ("<h2>Ranks</h2><p>" + _e(ranks["verdict"]["line"]) + "</p>" + rank_histogram(ranks) +
            "<table><tr><th>rank</th><th>step, ms</th><th>own work, ms</th><th>data, ms</th><th>communication, ms</th>"
            "</tr>" + rows + "</table>" + note)


def rank_histogram(ranks: dict[str, Any], width: int = 640, height: int = 150, bins: int = 24) -> str:
    """How many ranks have each amount of own work per step, the slowest and the outliers named over their bar."""
    own = [r["own_ms_per_step"] for r in ranks["per_rank"]]
    lo, hi = min(own), max(own)
    size = (hi - lo) / bins or 1.0
    bin_of = [min(int((value - lo) / size), bins - 1) for value in own]
    counts = [bin_of.count(k) for k in range(bins)]
    named = {ranks["verdict"]["slowest"], *(o["rank"] for o in ranks["verdict"].get("outliers", [])[:NAMED_WAITING])}
    labels: dict[int, list[str]] = {}
    for r, k in zip(ranks["per_rank"], bin_of):
        if r["rank"] in named:
            labels.setdefault(k, []).append(str(r["rank"]))
    top, bottom, bar = 16, 28, width / bins
    y = lambda n: top + (1 - n / max(counts)) * (height - top - bottom)  # noqa: E731
    out = [f"<svg class='chart' role='img' aria-label='ranks by own work per step' width='{width}' height='{height}' "
           f"viewBox='0 0 {width} {height}'>"]
    for k, n in enumerate(counts):
        if n:
            out.append(f"<rect x='{k * bar + 1:.1f}' y='{y(n):.1f}' width='{bar - 2:.1f}' "
                       f"height='{height - bottom - y(n):.1f}' "
                       f"fill='{COLORS['Kernel']}'><title>{n} rank(s), {lo + k * size:.2f}-{lo + (k + 1) * size:.2f} ms"
                       "</title></rect>")
        if k in labels:
            out.append(f"<text x='{(k + 0.5) * bar:.1f}' y='{y(n) - 4:.1f}' text-anchor='middle'>rank "
                       f"{_e(', '.join(labels[k][:3]))}</text>")
    out.append(f"<text x='0' y='{height - 14}'>{lo:.2f}</text><text x='{width}' y='{height - 14}' text-anchor='end'>"
               f"{hi:.2f}</text><text x='{width / 2}' y='{height - 2}' text-anchor='middle' class='muted'>own work per "
               f"step, ms ({len(own)} ranks)</text></svg>")
    return "".join(out)


def page(run_dir: str, data: RunData, windows: list[dict[str, Any]], here: str, trace_dir: str) -> str:
    """The report of the run at ``run_dir``; links are relative to ``here``, the folder the page is written to."""
    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    sections = [
        f"<h1>Run report: {_e(os.path.basename(os.path.abspath(run_dir)))}</h1>",
        f"<p class='muted'>{_e(os.path.abspath(run_dir))}; made by <code>profkit report</code> on {now}; metrics from "
        f"{_e(data.source or 'no logger file')}; {len(windows)} trace(s) in {len({w.get('window') for w in windows})} window(s).</p>",
        "<h2>Epochs</h2>", _epochs(data.epochs),
        "<h2>Alerts</h2>", _alerts(data),
        "<h2>Windows</h2>",
        "".join(_window(w, here, run_dir) for w in windows) or "<p class='muted'>No profiled window in this run.</p>",
        _ranks(ranks_section(windows)),
        "<h2>Opening the traces</h2><ul>",
        f"<li>TensorBoard's PyTorch Profiler tab: <code>tensorboard --logdir {_e(trace_dir)}</code></li>",
        "<li>Perfetto: open a <code>.pt.trace.json.gz</code> file at ui.perfetto.dev (it stays on your machine)</li>",
        f"<li>HolisticTraceAnalysis: <code>TraceAnalysis(trace_dir=\"{_e(trace_dir)}/&lt;window&gt;\")</code></li>",
        f"<li>The figures as text or JSON: <code>profkit summary {_e(trace_dir)}</code></li></ul>",
    ]
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>profkit report</title>"
            f"<meta name='viewport' content='width=device-width'><style>{_STYLE}</style></head><body>"
            + "".join(sections) + "</body></html>\n")
