"""MkDocs hook: the API page's table of ``PerformanceMonitor``'s arguments (name, type, default, what it does, where
the guide explains it), made at build time from the signature and the docstring's ``Args:``, so it cannot drift from
the code. An argument missing from ``Args:``, or from ``EXPLAINED`` below, fails the build.

The page that explains each argument is kept here, not in the docstring: the docstring is also what ``help()`` and
editors show, where a page of this site is no link."""

from __future__ import annotations

import inspect
import os
import re
import sys

from mkdocs.exceptions import PluginError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = "<!-- arguments -->"  # where on a page the table goes

_STEPS = "choosing-steps.md"
_STORAGE = "traces-and-storage.md"
_ALERTS = "alerts.md"
EXPLAINED = {  # argument: the page (and heading) that explains it, relative to docs/
    "profile": "metrics.md#metrics-only",
    "skip_first": _STEPS, "warmup": _STEPS, "active": _STEPS, "steps": _STEPS, "every_n_steps": _STEPS,
    "step_filter": _STEPS, "ranks": _STEPS, "dirpath": _STORAGE, "activities": _STEPS, "record_shapes": _STEPS,
    "profile_memory": _STEPS, "with_stack": _STEPS, "with_flops": _STEPS, "with_modules": _STEPS, "quiet": _STEPS,
    "flush_timeout": _STORAGE, "log_metrics": "metrics.md",
    "alert_threshold": _ALERTS, "alert_window": _ALERTS, "alert_patience": _ALERTS, "alert_cooldown": _ALERTS,
    "alert_action": _ALERTS, "on_alert": _ALERTS, "capture_on_alert": _ALERTS,
    "max_captures": "alerts.md#capture-on-demand", "keep_last_windows": _STORAGE, "max_trace_mb": _STORAGE,
    "validation_batches": _STEPS, "storage_options": _STORAGE,
}
TITLES = {"metrics.md": "Metrics", _STEPS: "Choosing steps", _STORAGE: "Traces and storage",
          _ALERTS: "Alerts, advice and capture"}


def documented(doc: str) -> dict[str, str]:
    """The docstring's ``Args:`` entries, name: text (continuation lines joined), in their order."""
    args = inspect.cleandoc(doc).split("\nArgs:\n", 1)[1]
    out: dict[str, str] = {}
    for line in args.splitlines():
        if entry := re.match(r"^    (\w+): (.*)$", line):
            out[entry[1]] = entry[2]
        elif line.startswith("        ") and out:
            out[list(out)[-1]] += " " + line.strip()
        elif line.strip():  # the next section (Example::)
            break
    return out


def readable(annotation: str) -> str:
    """A signature's annotation as a user passes it: ``Optional[X]`` as ``X | None``, step ranges as what they take."""
    annotation = annotation.replace("StepRanges", "str | list")
    while (m := re.search(r"Optional\[", annotation)):
        depth, end = 1, m.end()
        while depth:
            depth += {"[": 1, "]": -1}.get(annotation[end], 0)
            end += 1
        annotation = annotation[:m.start()] + annotation[m.end():end - 1] + " | None" + annotation[end:]
    return annotation


def markdown(text: str) -> str:
    """The docstring's reStructuredText as Markdown in a table cell."""
    text = re.sub(r":class:`~?([\w.]+\.)?(\w+)`", r"`\2`", text)
    parts = text.replace("``", "`").split("`")
    return "`".join(part if i % 2 else part.replace("|", "\\|") for i, part in enumerate(parts))  # code keeps its |


def default(value) -> str:
    return f'`"{value}"`' if isinstance(value, str) else f"`{value!r}`"


def table() -> str:
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)  # this checkout's package, whatever the environment installed
    from lightning_profkit.callback import PerformanceMonitor

    parameters = inspect.signature(PerformanceMonitor).parameters
    entries = documented(PerformanceMonitor.__doc__ or "")
    if list(entries) != list(parameters):
        raise PluginError(f"PerformanceMonitor's docstring Args: {list(entries)} are not its signature's "
                          f"arguments in order: {list(parameters)}")
    if missing := [name for name in parameters if name not in EXPLAINED]:
        raise PluginError(f"docs/arguments.py: say in EXPLAINED which page explains {missing}")
    rows = ["| argument | type | default | what it does | explained in |", "|---|---|---|---|---|"]
    for name, p in parameters.items():
        page = EXPLAINED[name]
        rows.append(f"| `{name}` | `{readable(str(p.annotation))}` | {default(p.default)} | {markdown(entries[name])} "
                    f"| [{TITLES[page.split('#')[0]]}]({page}) |")
    return "\n".join(rows)


def on_page_markdown(markdown_text: str, page, config, files) -> str:
    if MARKER not in markdown_text:
        return markdown_text
    return markdown_text.replace(MARKER, table())
