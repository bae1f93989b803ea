"""The alerts a user receives: what ``on_alert`` is handed, the warning's category, the error ``"raise"`` raises."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Optional


class DataWaitWarning(UserWarning):
    """The category of data-wait alert warnings (filter it like any warning)."""


@dataclass(frozen=True)
class DataWaitAlert:
    """What an alert hands to ``on_alert`` and prints: the figures, the advice and the steps recorded for it. Once
    their trace is written, ``PerformanceMonitor.alerts`` holds a copy with its ``trace_dir``."""

    ratio: float  # data-wait ratio of the check that fired (the worst rank's, with several ranks)
    threshold: float
    epoch: int
    step: int  # the fit's step (its batches counted from 0 across epochs) at which the check fired
    checked: str  # what was measured: "epoch E, batches A-B" (a rolling check; "epoch E batch A to epoch F batch B"
    # where it spans epochs), or "epoch E"
    worst_rank: Optional[int] = None  # with several ranks
    advice: list[str] = field(default_factory=list)
    trace_dir: Optional[str] = None  # the window captured after the alert, once its trace is written
    log_step: Optional[int] = None  # the step on the loggers' axis (Lightning's for ``self.log``) at which it fired
    recording: Optional[tuple[int, int]] = None  # the steps being recorded for it, where a window was started

    @property
    def headline(self) -> str:
        rank = f" on rank {self.worst_rank}" if self.worst_rank is not None else ""
        return f"{self.checked}: data wait was {self.ratio:.0%} of the training time{rank} (alert at {self.threshold:.0%})"

    @property
    def message(self) -> str:
        lines = [self.headline] + [f"  - {line}" for line in self.advice]
        if self.trace_line:
            lines.append(f"  {self.trace_line}")
        return "\n".join(lines)

    @property
    def trace_line(self) -> str:
        """Where its trace is, or which steps are being recorded for it; empty when none are."""
        if self.trace_dir:
            return f"Trace of the steps after the alert: {self.trace_dir}"
        if self.recording:
            steps = self.recording[1] - self.recording[0] + 1
            return f"Recording {steps} steps after it; their trace is named when written"
        return ""

    @property
    def markdown(self) -> str:
        """The message as Markdown (TensorBoard's Text tab renders it), every text in it shown as written."""
        parts = [f"**{as_text(self.headline)}**", "\n".join(f"- {as_text(line)}" for line in self.advice)]
        return "\n\n".join(p for p in parts + [as_text(self.trace_line)] if p)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"message": self.message}


# what Python-Markdown (TensorBoard's) lets a backslash escape, as the inside of a regex class
MARKDOWN_ESCAPABLE = r"\\`*_{}\[\]()#+\-.!|"
_MARKDOWN = re.compile(f"([{MARKDOWN_ESCAPABLE}])")


def as_text(text: str) -> str:
    """``text`` as Markdown that renders to exactly ``text`` (``__getitem__`` is not bold, ``<b>`` no tag)."""
    escaped = _MARKDOWN.sub(r"\\\1", text)
    return escaped.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class DataWaitAlertError(RuntimeError):
    """Raised by ``PerformanceMonitor(alert_action="raise")``; the alert is in ``.alert``."""

    def __init__(self, alert: DataWaitAlert) -> None:
        super().__init__(alert.message)
        self.alert = alert
